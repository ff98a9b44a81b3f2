"""msprobe.core: everything of msprobe that needs no deep-learning framework.

Configuration, entry naming, selection, value encoding, writers, comparison and the ``msprobe``
command live here once and are shared by ``msprobe.pytorch`` and ``msprobe.mindspore``. This package
must never import torch or mindspore (a test checks it in a fresh interpreter).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GradComparator"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, so that `import msprobe.core` (and the msprobe command) stays light.
    if name == "GradComparator":
        from msprobe.core.grad_probe import GradComparator

        return GradComparator
    raise AttributeError(f"module 'msprobe.core' has no attribute {name!r}")
