"""One dump entry turned back into a torch call and run: the replay core run_ut and attribution share.

:func:`replay_entry` takes an entry, the inputs to run it on and the record whose dtypes to run at, and
either gives a :class:`Call` to the caller's sides or says why the entry cannot be replayed (a SKIP
reason: docs/run_ut.md). A :class:`Side` is one run of the call: a device, the recorded dtype or the
upcast bench, autocast as the record shows it, copies for an in-place API (docs/run_ut.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import torch

from msprobe.core.run_ut.replay_common import (
    RANDOM_APIS,
    RunUtError,
    TensorFileError,
    Unreplayable,
    base_api,
    first_line,
    is_inplace,
    is_tensor_value,
    split_name,
)
from msprobe.pytorch.run_ut.inputs import rebuild, torch_dtype

REPLAYED_PREFIXES = ("Torch", "Tensor", "Functional", "VF", "NPU")
UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
_LOW = (torch.float16, torch.bfloat16)
T = TypeVar("T")


@lru_cache(maxsize=1)
def api_table() -> dict[str, Any]:
    """``Prefix.api`` → the torch callable, the reverse of the table the dump names calls with."""
    from msprobe.pytorch.hooks.api_names import build_api_table

    return {f"{prefix}.{api}": obj for obj, (prefix, api) in build_api_table().items()}


def resolve(prefix: str, api: str) -> Callable[..., Any] | None:
    """The torch callable recorded as ``prefix.api`` (the reverse of the dump's naming table)."""
    found = api_table().get(f"{prefix}.{api}")
    if found is not None:
        return found
    roots = {"Torch": torch, "Tensor": torch.Tensor, "Functional": torch.nn.functional, "VF": torch._VF}
    obj: Any = roots.get(prefix)
    for part in api.split(".") if obj is not None else ():
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def skip_reason(prefix: str, api: str) -> str:
    """Why the API recorded as ``prefix.api`` cannot be replayed at all, or "" when it can."""
    if prefix == "Module":
        return "a module, not an API: run_ut replays APIs"
    if prefix == "Distributed":
        return "distributed API: its result depends on the other ranks"
    if prefix == "Aten":
        return "Aten APIs are not replayed"
    if prefix not in REPLAYED_PREFIXES:  # custom_op_namespaces or register_custom_api (docs/run_ut.md#custom-apis)
        return f"no bench: {prefix}.{api} is a custom API; run_ut has no reference implementation to replay it on"
    if base_api(api) in RANDOM_APIS:
        return "random API: not numerically comparable (its result depends on the random state)"
    if resolve(prefix, api) is None:
        return f"{prefix}.{api} is not a callable of this torch"
    return ""


def collect_tensor_values(value: Any, out: list) -> None:
    """The tensor values of an argument tree, in the order :func:`rebuild` visits them (and the dump
    lists the input gradients)."""
    if isinstance(value, list):
        for v in value:
            collect_tensor_values(v, out)
    elif is_tensor_value(value):
        out.append(value)
    elif isinstance(value, dict) and "type" not in value:
        for v in value.values():
            collect_tensor_values(v, out)


def autocast_dtype(entry: dict, base: list[torch.Tensor]) -> torch.dtype | None:
    """The dtype autocast ran the API in: every recorded float output is float16 (or every one bfloat16)
    while some float input is float32."""
    outs: list[dict] = []
    collect_tensor_values(entry.get("output"), outs)
    dtypes = {str(o.get("dtype")) for o in outs}
    if len(dtypes) != 1:
        return None
    try:
        out_dtype = torch_dtype(dtypes.pop())
    except Unreplayable:
        return None
    if out_dtype in _LOW and any(t.dtype == torch.float32 for t in base):
        return out_dtype
    return None


@dataclass(frozen=True)
class Refused:
    """Why an entry was not replayed (its SKIP message); ``input_error`` when a tensor file of its inputs
    is missing or unreadable."""

    reason: str
    input_error: bool = False


@dataclass(frozen=True)
class Call:
    """One entry ready to run: its callable and argument trees, its tensor records (``values``) and the
    tensors made for them (``base``, at the dtypes of the record run at), and how autocast and in-place
    apply to them."""

    prefix: str
    api: str
    func: Callable[..., Any]
    args_v: list
    kwargs_v: dict
    values: list[dict]
    base: list[torch.Tensor]
    autocast: torch.dtype | None
    inplace: bool

    def run(self, device: torch.device, *, upcast: bool = False, needs_grad: Sequence[bool] = (),
            func: Callable[..., Any] | None = None) -> Side:
        """The call on one side: on ``device``, upcast for a bench, the inputs of ``needs_grad`` as leaves
        of the autograd graph, ``func`` in place of the API (a device-side override)."""
        side = Side(device, self.base, list(needs_grad), self.autocast, upcast=upcast, inplace=self.inplace)
        side.run(func or self.func, self.args_v, self.kwargs_v, any(needs_grad))
        return side


def replay_entry(entry_name: str, entry: dict, inputs: Callable[[list[dict]], list[torch.Tensor]],
                 use: Callable[[Call], T], at: dict | None = None) -> T | Refused:
    """Replay one dump entry: its call on the tensors ``inputs`` makes for its tensor records, cast to the
    dtypes the record ``at`` holds (default: the entry itself), handed to ``use``, which runs it on its
    sides and returns what it needs. An entry that cannot be replayed, a missing tensor file or an API that
    raises gives the :class:`Refused` reason instead; any other :class:`RunUtError` (the dump itself is
    unusable) is raised."""
    prefix, api, _ = split_name(entry_name)
    refusal = skip_reason(prefix, api)
    if refusal:
        return Refused(refusal)
    try:
        return use(_call(prefix, api, entry, entry if at is None else at, inputs))
    except Unreplayable as exc:
        return Refused(f"cannot replay: {exc}")
    except TensorFileError as exc:  # this API's inputs are gone; the others may still be replayed
        return Refused(f"cannot replay: {exc}", input_error=True)
    except RunUtError:
        raise
    except Exception as exc:  # the API itself failed on these inputs: said on its row, the run goes on
        return Refused(f"replay failed: {type(exc).__name__}: {first_line(exc)}")


def _call(prefix: str, api: str, entry: dict, at: dict, inputs: Callable[[list[dict]], list[torch.Tensor]]) -> Call:
    args_v, kwargs_v = entry.get("input_args") or [], entry.get("input_kwargs") or {}
    if not isinstance(args_v, list) or not isinstance(kwargs_v, dict):
        raise Unreplayable("input_args/input_kwargs are not a list and an object")
    values: list[dict] = []
    at_values: list[dict] = []
    collect_tensor_values([args_v, kwargs_v], values)
    collect_tensor_values([at.get("input_args") or [], at.get("input_kwargs") or {}], at_values)
    if len(values) != len(at_values):
        raise Unreplayable(f"the record run at has {len(at_values)} input tensors, the inputs' record {len(values)}")
    base = [t.to(torch_dtype(v.get("dtype"))) for t, v in zip(inputs(values), at_values)]
    func = resolve(prefix, api)
    assert func is not None  # skip_reason said so
    return Call(prefix, api, func, args_v, kwargs_v, values, base, autocast_dtype(at, base), is_inplace(api))


class Side:
    """One side of the replay: its device, its leaf tensors (gradients are taken with respect to them)
    and the tensors the API is called with (autocast dtype, copies for in-place APIs)."""

    def __init__(self, device: torch.device, base: list[torch.Tensor], needs_grad: list[bool],
                 autocast: torch.dtype | None, upcast: bool, inplace: bool) -> None:
        self.device, self.needs_grad = device, needs_grad or [False] * len(base)
        self.autocast = autocast
        self.leaves: list[torch.Tensor | None] = []
        self.inputs: list[torch.Tensor] = []
        self.grads: list = []
        self.flat: list = []
        self.upcast = upcast
        for i, t in enumerate(base):
            dtype = UPCAST.get(t.dtype, t.dtype) if upcast else t.dtype
            leaf = t.to(device=device, dtype=dtype, copy=True)
            grad = self.needs_grad[i]
            if grad:
                leaf.requires_grad_(True)
            used = leaf
            if autocast is not None and leaf.is_floating_point():
                # both sides start from the values autocast gave the API; the bench then computes upcast
                used = leaf.to(autocast).to(UPCAST[autocast]) if upcast else leaf.to(autocast)
            if inplace and used is leaf and grad:
                used = leaf.clone()
            self.leaves.append(leaf if grad else None)
            self.inputs.append(used)

    def _device(self, _recorded: str) -> torch.device:
        return self.device

    def _dtype(self, value: Any) -> Any:
        """On the bench, a float16/bfloat16/float32 dtype argument is upcast like the tensors."""
        return UPCAST.get(value, value) if self.upcast and isinstance(value, torch.dtype) else value

    def run(self, func: Callable[..., Any], args_v: list, kwargs_v: dict, grad: bool) -> list:
        """The API's outputs, flat (tensors and Python numbers), also kept as ``flat``."""
        it = iter(self.inputs)

        def build(value: Any) -> Any:
            return _map_dtypes(rebuild(value, lambda _v: next(it), self._device), self._dtype)

        args = _index_as_tuple(func, build(args_v))
        kwargs = build(kwargs_v)
        with torch.set_grad_enabled(grad):
            out = func(*args, **kwargs)
        flat = _flat_outputs(out, [])
        if not any(isinstance(v, torch.Tensor) for v in flat) and self.inputs and out is None:
            flat = [args[0]] if args and isinstance(args[0], torch.Tensor) else flat  # __setitem__ and the like
        self.flat = flat
        return flat


def _flat_outputs(value: Any, out: list) -> list:
    if isinstance(value, (list, tuple)):
        for v in value:
            _flat_outputs(v, out)
    elif isinstance(value, (torch.Tensor, bool, int, float, complex)):
        out.append(value)
    return out


def _index_as_tuple(func: Callable[..., Any], args: list) -> list:
    """dump.json writes a tuple as a list: give ``__getitem__``/``__setitem__`` back the tuple of a
    multi-dimensional index (one holding a slice, None, Ellipsis or a tensor — what torch reads as a
    tuple today, with a deprecation warning). A list of plain ints stays a list (advanced indexing)."""
    if getattr(func, "__name__", "") not in ("__getitem__", "__setitem__") or len(args) < 2:
        return args
    index = args[1]
    if isinstance(index, list) and not all(isinstance(i, int) for i in index):
        return [args[0], tuple(index), *args[2:]]
    return args


def _map_dtypes(value: Any, convert: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_map_dtypes(v, convert) for v in value]
    if isinstance(value, dict):
        return {k: _map_dtypes(v, convert) for k, v in value.items()}
    return convert(value)
