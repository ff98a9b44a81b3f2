"""Primitive calls inside the attached model (``Primitive.{attr}.{Class}.{count}.{direction}``).

A primitive is called through the attribute of the cell that owns it (``self.matmul(x, w)`` in
``nn.Dense``), and ``Primitive.__call__`` cannot be replaced per instance (Python looks special
methods up on the class; many generated primitive classes define their own). So while recording we
shadow each such attribute in the cell's instance dictionary with a small callable that records and
delegates; ``Cell._primitives`` keeps the real object for MindSpore's own bookkeeping.
"""

from __future__ import annotations

from typing import Any

import mindspore
from mindspore import nn
from mindspore.ops import Primitive
from msprobe.core.services.handles import Handle, patch_attributes
from msprobe.mindspore.hooks.api_patch import RunApi
from msprobe.mindspore.hooks.guards import settle_then


def unwritten_outputs(primitive: Primitive) -> frozenset[int]:
    """The outputs ``primitive`` returns without writing them, recorded as null: uninitialised memory
    differs from run to run, and compare named the first BatchNorm of every ResNet as diverging.
    MindSpore's CPU ``BatchNorm`` in training leaves outputs 1 and 2 (batch mean and variance) unwritten;
    ``nn.BatchNorm*d`` reads output 0 only (docs/mindspore/dump.md)."""
    if type(primitive).__name__ == "BatchNorm" and getattr(primitive, "is_training", False) \
            and mindspore.get_context("device_target") == "CPU":
        return frozenset((1, 2))
    return frozenset()


class _PrimitiveCall:
    """Stands in for one primitive attribute; attribute reads go to the primitive itself."""

    def __init__(self, primitive: Primitive, api: str, run_api: RunApi) -> None:
        self._primitive = primitive
        self._api = api
        self._run_api = run_api
        self._unwritten = unwritten_outputs(primitive)
        # one that writes into its inputs (BatchNorm's moving statistics, Assign) runs after the pending
        # reads, its inputs' among them (msprobe.mindspore.reads)
        self._run = settle_then(primitive) if primitive.attrs.get("side_effect_mem") else primitive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._unwritten:
            return self._run_api("Primitive", self._api, self._run, args, kwargs, False)
        returned: list = []  # what the primitive returned, whole; the recording sees it without the unwritten

        def recorded(*call_args: Any, **call_kwargs: Any) -> tuple:
            output = self._run(*call_args, **call_kwargs)
            returned.append(output)
            return tuple(None if i in self._unwritten else item for i, item in enumerate(output))

        seen = self._run_api("Primitive", self._api, recorded, args, kwargs, False)
        whole = returned[0]
        # a sink's replacement (free benchmark) replaces what it saw; the unwritten outputs stay as returned
        return tuple(whole[i] if i in self._unwritten else item for i, item in enumerate(seen))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._primitive, name)


class PrimitiveTaps:
    """Every primitive attribute of every cell of ``model``, the root included."""

    def __init__(self, model: nn.Cell, run_api: RunApi) -> None:
        self._slots = []
        for _, cell in model.cells_and_names():
            for attr, value in list(vars(cell).items()):
                # private attributes are MindSpore's own (the primitive behind cell backward hooks)
                if isinstance(value, Primitive) and not attr.startswith("_"):
                    api = f"{attr}.{type(value).__name__}"
                    self._slots.append((cell, attr, _PrimitiveCall(value, api, run_api)))

    def install(self) -> Handle:
        """Shadow each primitive attribute with its stand-in; the handle puts the primitives back."""
        return patch_attributes(self._slots, set_attr=object.__setattr__)
