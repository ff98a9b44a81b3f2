"""The one place msprobe reaches into MindSpore's private API.

MindSpore exposes neither "is a gradient being recorded", "wait for the kernels", nor the jit
executor publicly. They moved from ``mindspore.common.api`` to ``mindspore.graph.api`` in 2.9 (the old
module still works but warns on import), so both locations are tried here, once.
"""

from __future__ import annotations

try:  # MindSpore >= 2.9
    from mindspore.graph.api import _JitExecutor, _pynative_executor
except ImportError:  # pragma: no cover - older MindSpore
    from mindspore.common.api import _JitExecutor, _pynative_executor

__all__ = ["_JitExecutor", "_pynative_executor"]
