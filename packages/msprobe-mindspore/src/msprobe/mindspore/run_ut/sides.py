"""The two sides of a MindSpore replay: the *device* (MindSpore at the recorded dtype) and the *bench*
(PyTorch on CPU, :mod:`.torch_bench`, or MindSpore itself, float16/bfloat16 → float32 and
float32 → float64).

A side turns :class:`~.values.Leaf` arguments into its tensors, calls the API, flattens its outputs and
computes input gradients for given output gradients (a vector-Jacobian product). Forward and backward
are separate calls, each on freshly made tensors: an in-place API never changes what the next call sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import mindspore
from msprobe.core.run_ut.replay_common import widened
from msprobe.mindspore.run_ut.values import FLOATS, UPCAST, DtypeArg, Leaf, canonical, map_leaves


class Side:
    """What both frameworks share; subclasses give the tensor operations."""

    name = ""
    upcast = False

    def target(self, dtype: str) -> str:
        """The dtype this side computes a ``dtype`` input in."""
        return UPCAST.get(dtype, dtype) if self.upcast else dtype

    # --- per framework ------------------------------------------------------------------------------

    tensor_type: type | tuple[type, ...] = ()  # the framework's tensor class

    def tensor(self, leaf: Leaf) -> Any:
        raise NotImplementedError

    def dtype(self, arg: DtypeArg) -> Any:
        raise NotImplementedError

    def cast(self, tensor: Any, dtype: Any) -> Any:
        raise NotImplementedError

    def host_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values as numpy, exactly (bfloat16, which numpy lacks, as float32)."""
        raise NotImplementedError

    def vjp(self, func: Callable[..., tuple], inputs: list, grads: list) -> list:
        """Gradients of ``func(*inputs)`` (a tuple of tensors) for output gradients ``grads``: one per
        input, None where it has none."""
        raise NotImplementedError

    # --- shared -------------------------------------------------------------------------------------

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, self.tensor_type)

    def is_float(self, value: Any) -> bool:
        return self.is_tensor(value) and (value.is_floating_point() or value.is_complex())

    def cast_like(self, grad: Any, output: Any) -> Any:
        """An output gradient as the output holds it: its dtype, and its shape (a scalar's gradient is
        recorded with shape [1])."""
        grad = self.cast(grad, output.dtype)
        return grad.reshape(output.shape) if tuple(grad.shape) != tuple(output.shape) else grad

    def to_numpy(self, value: Any) -> np.ndarray:
        return widened(self.host_numpy(value)) if self.is_tensor(value) else np.asarray(value)

    def dtype_name(self, value: Any) -> str:
        return canonical(str(value.dtype)) if self.is_tensor(value) else type(value).__name__

    def build(self, value: Any, replace: dict[int, Any] | None = None) -> Any:
        """``value`` (rebuilt arguments) with this side's tensors and dtypes; ``replace`` maps
        ``id(leaf)`` to a tensor to use instead (the inputs of a backward)."""
        replace = replace or {}

        def convert(item: Leaf | DtypeArg) -> Any:
            if isinstance(item, DtypeArg):
                return self.dtype(item)
            return replace[id(item)] if id(item) in replace else self.tensor(item)

        return map_leaves(value, convert)

    def flat(self, output: Any) -> list:
        """The outputs in order: tensors and Python numbers, nested tuples/lists flattened."""
        if isinstance(output, (tuple, list)):
            return [item for part in output for item in self.flat(part)]
        if self.is_tensor(output) or isinstance(output, (bool, int, float)):
            return [output]
        return []

    def forward(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[list, tuple]:
        """(flat outputs, the arguments used): for an API returning nothing (``__setitem__``) the
        outputs are its first argument, which it changed."""
        built_args, built_kwargs = self.build(args), self.build(kwargs)
        flat = self.flat(func(*built_args, **built_kwargs))
        if not flat and built_args and self.is_tensor(built_args[0]):
            flat = [built_args[0]]
        return flat, built_args

    def backward(self, func: Callable[..., Any], args: tuple, kwargs: dict, slots: list[Leaf],
                 output_grads: list[Leaf]) -> list:
        """Input gradients (one per ``slots`` leaf) of the API's floating outputs for ``output_grads``
        (one per floating output, in order)."""

        def differentiable_outputs(*tensors: Any) -> tuple:
            replace = {id(leaf): t for leaf, t in zip(slots, tensors)}
            out = self.flat(func(*self.build(args, replace), **self.build(kwargs, replace)))
            return tuple(o for o in out if self.is_float(o))

        inputs = [self.tensor(leaf) for leaf in slots]
        probe = differentiable_outputs(*inputs)
        if len(probe) != len(output_grads):
            raise ValueError(f"{len(probe)} floating outputs, {len(output_grads)} recorded output gradients")
        grads = []
        for leaf, out in zip(output_grads, probe):
            grads.append(self.cast_like(self.tensor(leaf), out))
        return self.vjp(differentiable_outputs, inputs, grads)


_MS_DTYPES = {name: getattr(mindspore, "bool_" if name == "bool" else name) for name in
              ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
               "uint32", "uint64", "bool", "complex64", "complex128")}


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 ``values`` rounded to the numbers of floating ``dtype`` (as float64)."""
    if dtype == "bfloat16":
        tensor = mindspore.Tensor(values.astype(np.float32)).astype(mindspore.bfloat16)
        return tensor.astype(mindspore.float32).asnumpy().astype(np.float64)
    return values.astype(dtype).astype(np.float64)


class MindSporeSide(Side):
    """MindSpore in PyNative mode on its current device target: the recorded dtype (device) or upcast
    (the bench when PyTorch is not used)."""

    name = "mindspore"
    tensor_type = mindspore.Tensor

    def __init__(self, upcast: bool) -> None:
        self.upcast = upcast

    def tensor(self, leaf: Leaf) -> mindspore.Tensor:
        dtype = self.target(leaf.dtype)
        values = leaf.values
        if dtype in FLOATS:  # exact in float32 unless the dtype is float64
            values = values.astype(np.float64 if dtype == "float64" else np.float32)
        elif dtype.startswith("complex"):
            values = values.astype(dtype)
        elif dtype != "bool":
            values = values.astype(dtype)
        return mindspore.Tensor(values).astype(_MS_DTYPES[dtype])

    def dtype(self, arg: DtypeArg) -> Any:
        return _MS_DTYPES[self.target(arg.dtype)]

    def cast(self, tensor: Any, dtype: Any) -> Any:
        return tensor.astype(dtype)

    def host_numpy(self, tensor: Any) -> np.ndarray:
        return (tensor.astype(mindspore.float32) if tensor.dtype == mindspore.bfloat16 else tensor).asnumpy()

    def vjp(self, func: Callable[..., tuple], inputs: list, grads: list) -> list:
        _, pullback = mindspore.vjp(func, *inputs)
        found = pullback(tuple(grads))
        return list(found) if isinstance(found, (tuple, list)) else [found]
