"""Where the user's code called pyfuse: the ``file:line`` that every error of pyfuse names.

:func:`user_location` is read by the tracer (each op's line), the runtime (an argument that
does not fit) and the compile driver (an internal error): it sits on the runtime's ground
floor so that all of them can import it downwards. It reads only the interpreter's stack.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

# pyfuse's own folder: a frame in a file under it is pyfuse's, any other is the user's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str | None:
    """``file:line`` of the innermost frame outside pyfuse (None when there is none)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(PACKAGE_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None
