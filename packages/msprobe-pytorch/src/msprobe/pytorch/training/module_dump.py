"""``module_dump(module, name)`` / ``module_dump_end()``: collect one module as a single unit.

Between the two calls only the given module's own forward (and later its backward) is collected,
named ``Module.{name}.{Class}.forward.{n}`` — our entry grammar, so compare and filters treat it
like any module (1.1.1 named it ``{name}.{n}.forward``). Its child modules and the APIs it calls are
not collected; after ``module_dump_end`` collection goes back to what the level asks for. Both act on
the running ``PrecisionDebugger``; without one (or outside ``start``/``stop``) they do nothing but say so.
``module_dump`` returns a handle, so ``with module_dump(model.layer, "layer"):`` closes the window too.
"""

from __future__ import annotations

import torch

from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.core.services.handles import Handle
from msprobe.core.services.log import logger


def _interceptor():
    debugger = BaseDebugger.running()
    interceptor = None if debugger is None else debugger.interceptor
    if interceptor is None:
        logger.warning("module_dump: no running PrecisionDebugger with a dump task; nothing is collected")
    return interceptor


def module_dump(module: torch.nn.Module, name: str) -> Handle:
    """Open the window; the returned handle's ``remove()`` (or the end of a ``with`` block) closes it, as
    ``module_dump_end()`` does."""
    if not isinstance(name, str) or not name or "." in name or "/" in name:
        raise ValueError(f"module_dump: name must be a non-empty str without '.' or '/', got {name!r}")
    interceptor = _interceptor()
    return Handle() if interceptor is None else interceptor.dump_module(module, name)


def module_dump_end() -> None:
    interceptor = _interceptor()
    if interceptor is not None:
        interceptor.end_module_dump()
