"""Distributed tensors (``torch.distributed.tensor.DTensor``: FSDP2's parameters, tensor parallelism):
recorded as the shard this rank holds, with the layout that places it in the whole tensor.

Reading a DTensor's statistics through its own operators would run collectives (a reduction over a
sharded tensor is a cross-rank reduction), and msprobe adds no communication of its own: every
statistic, checksum and tensor file is of the local shard. The layout is written beside it as the
member ``dtensor`` (docs/pytorch/distributed.md), from which compare merges the shards of the ranks.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))  # tensors whose memory is their own values
_layouts: dict[tuple, dict] = {}  # (mesh, placements, global shape) → its dump.json member


def _dtensor_type() -> type | None:
    """DTensor's class when it has been imported (no DTensor can exist before); never imports it."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def local_shard(tensor: torch.Tensor) -> tuple[torch.Tensor, dict | None]:
    """(the tensor to read, its layout): a DTensor's local shard and layout; any other tensor as it is,
    with None. One type test for a plain tensor: this runs for every tensor of every entry."""
    if type(tensor) in PLAIN:
        return tensor, None
    dtensor = _dtensor_type()
    if dtensor is None or not isinstance(tensor, dtensor):
        return tensor, None
    return tensor._local_tensor, _layout(tensor)


def _layout(tensor: Any) -> dict:
    spec = tensor._spec
    key = (spec.mesh, spec.placements, tuple(tensor.shape))
    layout = _layouts.get(key)
    if layout is None:
        mesh = spec.mesh
        if len(_layouts) >= 1024:
            _layouts.clear()
        layout = _layouts[key] = {
            "placements": [_placement_name(p) for p in spec.placements],
            "mesh_shape": list(mesh.shape),
            "mesh_ranks": mesh.mesh.flatten().tolist(),
            "coordinate": list(mesh.get_coordinate() or ()),
            "global_shape": list(tensor.shape),
        }
    return layout


def _placement_name(placement: Any) -> str:
    """``Shard(d)``, ``Replicate()``, ``Partial(op)``: one spelling, whatever torch's own ``str`` is."""
    if placement.is_shard():
        return f"Shard({placement.dim})"
    if placement.is_replicate():
        return "Replicate()"
    if placement.is_partial():
        return f"Partial({getattr(placement, 'reduce_op', 'sum')})"
    return str(placement)
