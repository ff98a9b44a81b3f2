"""The user's call stack of an entry, for stack.json (docs/dump_format.md#stackjson-and-constructjson).

Frames are read straight from ``sys._getframe`` (much cheaper than ``traceback.extract_stack``,
which this runs for every selected call), innermost first, with every frame of msprobe itself left
out so the stack shows the user's code and the framework's, as 1.1.1's tools expect.

msprobe's frames are recognised by the directories its packages were really imported from, not by a
path that merely contains ``/msprobe/``: a user's project (or a clone of this repository) in a folder
named ``msprobe`` keeps its frames. PyTorch's ``handle_torch_function`` (``torch/overrides.py``), which
only hands a call to msprobe's TorchFunctionMode, is left out too.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sys
from types import CodeType

# msprobe's packages; found without importing them, so core never imports a framework.
_OWN_PACKAGES = ("msprobe.core", "msprobe.pytorch", "msprobe.mindspore")
# Framework modules whose frames only dispatch a call to msprobe's hooks; matched once imported.
_DISPATCH_MODULES = ("torch.overrides",)


def _package_dirs(name: str) -> list[str]:
    """The directories package ``name`` is (or would be) imported from; none when it is not installed."""
    module = sys.modules.get(name)
    locations = getattr(module, "__path__", None)
    if locations is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = (spec.submodule_search_locations or []) if spec is not None else []
    return list(locations)


def _own_dirs() -> tuple[str, ...]:
    """Each package directory as imported and as resolved (a symlinked install reports either)."""
    dirs: set[str] = set()
    for name in _OWN_PACKAGES:
        for location in _package_dirs(name):
            dirs.add(os.path.join(os.path.abspath(location), ""))
            dirs.add(os.path.join(os.path.realpath(location), ""))
    return tuple(sorted(dirs))


_own: tuple[str, ...] | None = None  # computed at the first stack, when msprobe's packages are imported


def _dispatch_files() -> set[str]:
    files = set()
    for name in _DISPATCH_MODULES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            files.update((os.path.abspath(path), os.path.realpath(path)))
    return files


def _is_own(filename: str) -> bool:
    """msprobe's own frame, or a framework frame that only dispatches to msprobe."""
    global _own
    if _own is None:
        _own = _own_dirs()
    path = os.path.abspath(filename)
    return path.startswith(_own) or path in _dispatch_files()


# (id of the code object, instruction offset) → (the code object, the frame's line in stack.json or None
# for msprobe's own frames). The same call sites repeat every step, so each is formatted (and its source
# line read) once. Why not the code object and line number as the key: a code object's hash is computed
# from its contents on every lookup, and a frame's line number from its line table; the id and the
# offset cost nothing. The value holds the code object, so its id cannot be reused while it is cached,
# and the lookup checks it is the same object.
_formatted: dict[tuple[int, int], tuple[CodeType, str | None]] = {}
_FORMATTED_LIMIT = 65536


def _format(code: CodeType, line: int, filename: str) -> str | None:
    if _is_own(filename):
        return None
    source = linecache.getline(filename, line).strip()
    return f"File {filename}, line {line}, in {code.co_name}, \n {source}"


def user_stack(skip: int = 1) -> list[str]:
    """Frames of the current call stack as ``"File <path>, line <n>, in <function>, \\n <source>"``."""
    frames = []
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        key = (id(code), frame.f_lasti)
        known = _formatted.get(key)
        if known is None or known[0] is not code:
            if len(_formatted) >= _FORMATTED_LIMIT:
                _formatted.clear()
            known = _formatted[key] = (code, _format(code, frame.f_lineno, code.co_filename))
        text = known[1]
        if text is not None:
            frames.append(text)
        frame = frame.f_back
    return frames
