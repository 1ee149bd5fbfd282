"""Frontend: the decorator, the tracer's symbolic Tensor, the public ops and array specs."""
