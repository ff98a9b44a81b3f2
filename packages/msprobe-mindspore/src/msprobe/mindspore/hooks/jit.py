"""``@mindspore.jit`` functions as ``Jit.{function name}.{count}.{direction}`` entries.

Functions are decorated when the user's module is imported, long before msprobe starts, so the
decorated function itself cannot be replaced. Every call of one goes through
``_JitExecutor.__call__`` (MindSpore's graph runner, private), which we replace while recording. While
a jit function runs, msprobe is busy: the graph compiler resolving ``ops.relu`` inside it sees the
wrapper but every call inside goes straight to the original.
"""

from __future__ import annotations

from typing import Any

from msprobe.core.services.handles import Handle, patch_attribute
from msprobe.mindspore.hooks.api_patch import RunApi
from msprobe.mindspore.private_api import _JitExecutor


def patch_jit(run_api: RunApi) -> Handle:
    """Route every ``@jit`` call through ``run_api``; the handle puts MindSpore's runner back."""
    original = _JitExecutor.__call__

    def call(executor: _JitExecutor, *args: Any, **kwargs: Any) -> Any:
        name = getattr(executor.fn, "__name__", "jit")
        if executor.obj is None:
            return run_api("Jit", name, lambda *a, **k: original(executor, *a, **k), args, kwargs, False)
        owner, rest = args[0], args[1:]
        return run_api("Jit", name, lambda *a, **k: original(executor, owner, *a, **k), rest, kwargs, False)

    return patch_attribute(_JitExecutor, "__call__", call)
