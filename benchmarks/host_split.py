"""Where a warm call's host time goes: the guard check, the shortcut's metadata check (or
the call key and the lookup of the bound plan it replaces), the output allocation and the
launch, each timed alone, beside a whole pyfuse
call and one torch ``x + y`` in the same process.

Run on a GPU machine with torch installed:

    PYTHONPATH=. python3 benchmarks/host_split.py [--count N] [--json FILE]

Each figure is the median over 9 trials of the mean wall time per call of ``count`` calls
(16-element float32 tensors, so the GPU never holds the host up); the parts are timed on
the objects a warm call uses (``pyfuse.runtime.calls``), so their sum is close to, not
exactly, the whole call.
"""

from __future__ import annotations

import torch
from common import host_options, per_call_us, report, warm_tiny_add

from pyfuse.runtime import calls
from pyfuse.runtime.arrays import call_key


def main() -> None:
    options = host_options(__doc__.splitlines()[0])
    x, y, fused = warm_tiny_add()
    state = fused.__dict__[calls._STATE]
    arrays = (x, y)
    key, _, _ = call_key(arrays)
    bound = state.bound[key]
    loaded = bound._loaded
    raw_stream = bound._stream
    fused(x, y)  # the second call in a row with one key: the shortcut exists from here on
    repeat = state.repeat
    out = torch.empty_like(x)
    buffers = [x.data_ptr(), y.data_ptr(), out.data_ptr()]
    count = options.count
    figures = {
        "torch x + y": per_call_us(lambda: x + y, count),
        "pyfuse call": per_call_us(lambda: fused(x, y), count),
        "  the shortcut, whole (check, output, launch)": per_call_us(
            (lambda: repeat.run(arrays)) if repeat else (lambda: None), count
        ),
        "  guard check": per_call_us(
            (lambda: state.check(state.captured)) if state.check else (lambda: None), count
        ),
        "  shortcut check": per_call_us(
            (lambda: repeat.pointers(arrays)) if repeat else (lambda: None), count
        ),
        "  call key (replaced)": per_call_us(lambda: call_key(arrays), count),
        "  bound lookup (replaced)": per_call_us(lambda: state.bound.get(key), count),
        "  output (empty_like)": per_call_us(lambda: torch.empty_like(x), count),
        "  stream handle": per_call_us(lambda: raw_stream(0), count),
        "  launch (Loaded.launch)": per_call_us(
            lambda: loaded.launch(buffers, raw_stream(0)), count
        ),
        "  empty call (Python floor)": per_call_us(lambda: None, count),
    }
    report(figures, options.json, width=46)


if __name__ == "__main__":
    main()
