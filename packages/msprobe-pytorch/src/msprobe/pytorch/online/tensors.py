"""torch tensors to and from the raw bytes of the online wire format (``msprobe.core.online.wire``).

Bytes are the tensor's elements in C order as the host stores them; bfloat16 and bool travel as
their bytes too, so no dtype needs a conversion and nothing is pickled.
"""

from __future__ import annotations

import torch

from msprobe.core.online.wire import WireError, WireTensor, tensor_nbytes


def wire_tensor(name: str, tensor: torch.Tensor) -> WireTensor:
    """A snapshot's bytes (copied to the host when it lives on a device); few torch calls, since this
    runs for every tensor on the sender's thread, next to the training."""
    with torch._C.DisableTorchFunction():
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        if not t.is_contiguous():
            t = t.contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same two bytes per element
            t = t.view(torch.int16)
        data = memoryview(t.numpy()).cast("B") if t.numel() else b""
        return WireTensor(name, dtype, tuple(t.shape), data)


def from_wire(item: WireTensor) -> torch.Tensor:
    """The tensor of a checked :class:`WireTensor` (its byte count already matches dtype and shape)."""
    dtype = getattr(torch, item.dtype, None)
    if not isinstance(dtype, torch.dtype) or len(item.data) != tensor_nbytes(item.dtype, item.shape):
        raise WireError(f"tensor {item.name!r}: unusable dtype {item.dtype!r} or size")
    if not len(item.data):
        return torch.empty(item.shape, dtype=dtype)
    return torch.frombuffer(bytearray(item.data), dtype=dtype).reshape(item.shape)
