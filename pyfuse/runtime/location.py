"""Where the user's code called pyfuse: the ``file:line`` that every error of pyfuse names.

:func:`user_location` is read by the tracer (each op's line), the runtime (an argument that
does not fit) and the compile driver (an internal error): it sits on the runtime's ground
floor so that all of them can import it downwards. It reads only the interpreter's stack.
"""

from __future__ import annotations

import functools
import os
import sys
from types import FrameType

# pyfuse's own folder: a frame in a file under it is pyfuse's, any other is the user's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def _is_pyfuse_file(filename: str) -> bool:
    """Whether code of ``filename`` is pyfuse's, remembered per file: every traced op asks
    for its line, and an ``abspath`` per frame cost 6-10% of the tracing time (a relative
    name is resolved against the working directory once)."""
    return os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep)


def user_location() -> str | None:
    """``file:line`` of the innermost frame outside pyfuse (None when there is none)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not _is_pyfuse_file(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None
