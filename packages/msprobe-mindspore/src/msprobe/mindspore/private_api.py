"""The one place msprobe reaches into MindSpore's private API.

MindSpore exposes neither "is a gradient being recorded", "wait for the kernels", nor the jit
executor publicly. They moved from ``mindspore.common.api`` to ``mindspore.graph.api`` in 2.9 (the old
module still works but warns on import), so both locations are tried here, once. The per-kernel seed
counters of seeded random ops (``_KERNEL_SEED``) are part of the random state free benchmark restores.
``pynative_synchronize`` is set on the context object itself: ``mindspore.set_context`` does the same after
logging a deprecation warning each time (its replacement, ``mindspore.runtime.launch_blocking()``, cannot be
undone), ≈ 0.4 ms at every start() and stop() (docs/performance.md#round-9-2026-12-06-the-main-threads-share).
"""

from __future__ import annotations

import importlib

try:  # MindSpore >= 2.9
    from mindspore.graph.api import _JitExecutor, _pynative_executor
except ImportError:  # pragma: no cover - older MindSpore
    from mindspore.common.api import _JitExecutor, _pynative_executor

from mindspore._c_expression import ms_ctx_param
from mindspore.context import _context

# ``mindspore.common.seed`` as an attribute is the ``seed`` function, hence import_module
KERNEL_SEEDS: dict = importlib.import_module("mindspore.common.seed")._KERNEL_SEED


def pynative_synchronize() -> bool:
    """``mindspore.get_context("pynative_synchronize")``."""
    return bool(_context().get_param(ms_ctx_param.pynative_synchronize))


def set_pynative_synchronize(enabled: bool) -> None:
    """``mindspore.set_context(pynative_synchronize=enabled)`` without its deprecation warning."""
    _context().set_param(ms_ctx_param.pynative_synchronize, enabled)


__all__ = ["KERNEL_SEEDS", "_JitExecutor", "_pynative_executor", "pynative_synchronize", "set_pynative_synchronize"]
