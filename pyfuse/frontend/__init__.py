"""Frontend: the decorator, the tracer's symbolic Tensor and the public ops: what the user
writes. It stands on :mod:`pyfuse.runtime`, which describes arguments, compiles and runs."""
