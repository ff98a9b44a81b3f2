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

from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.core.services.handles import Handle, patch_attributes
from msprobe.mindspore.hooks.catalog import ApiTarget

RunApi = Callable[[str, str, Callable, tuple, dict, bool], Any]
"""``run_api(prefix, api, original, args, kwargs, mutates_inputs)``: record (when not busy) and call."""


class ApiPatches:
    """The wrappers for a list of targets, built once; :meth:`install` swaps them in."""

    def __init__(self, targets: list[ApiTarget], run_api: RunApi) -> None:
        self._patches = [(t.owner, t.attr, _make_wrapper(t, getattr(t.owner, t.attr), run_api)) for t in targets]

    def install(self) -> Handle:
        """Put every wrapper in place; the handle restores the originals exactly."""
        return patch_attributes(self._patches)


def install_custom_apis(run_api: RunApi) -> Handle:
    """The functions given to ``register_custom_api`` (``msprobe.core.lifecycle.custom_apis``), recorded as
    ``{prefix}.{api}`` like every API while collecting (docs/mindspore/dump.md#custom-apis)."""
    return patch_attributes([(api.owner, api.attr, _recording(api.prefix, api.api, getattr(api.owner, api.attr),
                                                              False, run_api)) for api in CUSTOM_APIS.apis()])


def _make_wrapper(target: ApiTarget, original: Callable, run_api: RunApi) -> Callable:
    return _recording(target.prefix, target.attr, original, target.mutates_inputs, run_api)


def _recording(prefix: str, name: str, original: Callable, mutates: bool, run_api: RunApi) -> Callable:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_api(prefix, name, original, args, kwargs, mutates)

    return wrapper
