"""The user's call stack of an entry, for stack.json (SPEC 4.5).

Frames are read straight from ``sys._getframe`` (much cheaper than ``traceback.extract_stack``,
which this runs for every selected call), innermost first, with every frame of msprobe itself left
out so the stack shows the user's code and the framework's, as 1.1.1's tools expect.
"""

from __future__ import annotations

import linecache
import os
import sys

_OWN_PACKAGES = tuple(f"{os.sep}msprobe{os.sep}{name}{os.sep}" for name in ("core", "pytorch", "mindspore"))


def _is_own(filename: str) -> bool:
    return any(marker in filename for marker in _OWN_PACKAGES)


def user_stack(skip: int = 1) -> list[str]:
    """Frames of the current call stack as ``"File <path>, line <n>, in <function>, \\n <source>"``."""
    frames = []
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        if not _is_own(code.co_filename):
            source = linecache.getline(code.co_filename, frame.f_lineno).strip()
            frames.append(f"File {code.co_filename}, line {frame.f_lineno}, in {code.co_name}, \n {source}")
        frame = frame.f_back
    return frames
