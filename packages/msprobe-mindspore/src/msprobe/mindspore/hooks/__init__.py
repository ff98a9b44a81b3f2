"""MindSpore PyNative interception: API, cell, primitive and jit calls as ``msprobe.core.contract``."""

from msprobe.mindspore.hooks.interceptor import Interceptor

__all__ = ["Interceptor"]
