"""PyTorch interception: one mechanism, used by every task (see ``interceptor.py``)."""

from msprobe.pytorch.hooks.interceptor import Interceptor

__all__ = ["Interceptor"]
