"""Replacing API attributes (``ops.relu``, ``Tensor.__add__``, ``mint.abs``...) while recording.

MindSpore has no dispatch mode like PyTorch's ``TorchFunctionMode``, so API calls can only be seen by
replacing the attributes users call through. Each wrapper is built once, so ``ops.relu is ops.relu``
holds while recording, and the originals are put back exactly (the attribute is deleted again where
it was inherited, as for the C++ methods of ``Tensor``) when recording stops: outside recording
nothing of msprobe is on the call path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from msprobe.mindspore.hooks.catalog import ApiTarget

_INHERITED = object()

RunApi = Callable[[str, str, Callable, tuple, dict, bool], Any]
"""``run_api(prefix, api, original, args, kwargs, mutates_inputs)``: record (when not busy) and call."""


class ApiPatches:
    """The wrappers for a list of targets; :meth:`install` and :meth:`restore` swap them in and out."""

    def __init__(self, targets: list[ApiTarget], run_api: RunApi) -> None:
        self._entries = []
        for target in targets:
            own = vars(target.owner).get(target.attr, _INHERITED) if isinstance(target.owner, type) \
                else getattr(target.owner, target.attr)
            original = getattr(target.owner, target.attr)
            wrapper = _make_wrapper(target, original, run_api)
            self._entries.append((target, own, wrapper))
        self.installed = False

    def install(self) -> None:
        for target, _, wrapper in self._entries:
            setattr(target.owner, target.attr, wrapper)
        self.installed = True

    def restore(self) -> None:
        for target, own, _ in self._entries:
            if own is _INHERITED:
                delattr(target.owner, target.attr)
            else:
                setattr(target.owner, target.attr, own)
        self.installed = False


def _make_wrapper(target: ApiTarget, original: Callable, run_api: RunApi) -> Callable:
    prefix, name, mutates = target.prefix, target.attr, target.mutates_inputs

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_api(prefix, name, original, args, kwargs, mutates)

    return wrapper
