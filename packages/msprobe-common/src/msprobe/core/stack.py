"""The user's call stack of an entry, for stack.json (SPEC 4.5).

Frames are read straight from ``sys._getframe`` (much cheaper than ``traceback.extract_stack``,
which this runs for every selected call), innermost first, with every frame of msprobe itself left
out so the stack shows the user's code and the framework's, as 1.1.1's tools expect.
"""

from __future__ import annotations

import linecache
import os
import sys
from types import CodeType

_OWN_PACKAGES = tuple(f"{os.sep}msprobe{os.sep}{name}{os.sep}" for name in ("core", "pytorch", "mindspore"))


# (code object, line) → the frame's line in stack.json, or None for msprobe's own frames. The same call
# sites repeat every step, so each is formatted (and its source line read) once.
_formatted: dict[tuple[CodeType, int], str | None] = {}
_FORMATTED_LIMIT = 65536


def _is_own(filename: str) -> bool:
    return any(marker in filename for marker in _OWN_PACKAGES)


def _format(code: CodeType, line: int) -> str | None:
    if _is_own(code.co_filename):
        return None
    source = linecache.getline(code.co_filename, line).strip()
    return f"File {code.co_filename}, line {line}, in {code.co_name}, \n {source}"


def user_stack(skip: int = 1) -> list[str]:
    """Frames of the current call stack as ``"File <path>, line <n>, in <function>, \\n <source>"``."""
    frames = []
    frame = sys._getframe(skip)
    while frame is not None:
        key = (frame.f_code, frame.f_lineno)
        try:
            text = _formatted[key]
        except KeyError:
            if len(_formatted) >= _FORMATTED_LIMIT:
                _formatted.clear()
            text = _formatted[key] = _format(*key)
        if text is not None:
            frames.append(text)
        frame = frame.f_back
    return frames
