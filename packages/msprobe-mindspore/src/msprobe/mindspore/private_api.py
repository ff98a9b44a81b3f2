"""The one place msprobe reaches into MindSpore's private API.

MindSpore exposes neither "is a gradient being recorded", "wait for the kernels", nor the jit
executor publicly. They moved from ``mindspore.common.api`` to ``mindspore.graph.api`` in 2.9 (the old
module still works but warns on import), so both locations are tried here, once. The per-kernel seed
counters of seeded random ops (``_KERNEL_SEED``) are part of the random state free benchmark restores.
"""

from __future__ import annotations

import importlib

try:  # MindSpore >= 2.9
    from mindspore.graph.api import _JitExecutor, _pynative_executor
except ImportError:  # pragma: no cover - older MindSpore
    from mindspore.common.api import _JitExecutor, _pynative_executor

# ``mindspore.common.seed`` as an attribute is the ``seed`` function, hence import_module
KERNEL_SEEDS: dict = importlib.import_module("mindspore.common.seed")._KERNEL_SEED

__all__ = ["KERNEL_SEEDS", "_JitExecutor", "_pynative_executor"]
