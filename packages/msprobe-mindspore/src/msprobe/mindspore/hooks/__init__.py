"""MindSpore PyNative interception: API, cell, primitive and jit calls as ``msprobe.core.events``."""

from msprobe.mindspore.hooks.interceptor import Interceptor

__all__ = ["Interceptor"]
