"""msprobe.core: everything of msprobe that needs no deep-learning framework.

Configuration, entry naming, selection, value encoding, writers, comparison and the ``msprobe``
command live here once and are shared by ``msprobe.pytorch`` and ``msprobe.mindspore``. This package
must never import torch or mindspore (a test checks it in a fresh interpreter).
"""

from msprobe.core.services.lazy import lazy_exports

__all__ = ["GradComparator"]
__getattr__, __dir__ = lazy_exports(__name__, {"GradComparator": "msprobe.core.grad_probe"})
