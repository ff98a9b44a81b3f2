"""PyTorch's half of replay attribution (``compare --attribute``, :mod:`msprobe.core.compare.attribution`).

One API call is rebuilt from a dump record with run_ut's machinery — the callable from the same table
the interceptor names calls with (:func:`~msprobe.pytorch.run_ut.replay.resolve`), the arguments from
the saved files (:class:`~msprobe.pytorch.run_ut.inputs.TensorSource`) — and run once on the current
device with each tensor cast to the dtype the **target** run recorded for it. Attribution asks for two
replays of each suspect: on the bench's inputs and on the target's own. An API the target ran under
autocast (float32 inputs, bfloat16/float16 outputs) runs in the output dtype, as autocast did. What
cannot be replayed says why instead of failing the comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from msprobe.core.compare.attribution import ReplayRequest
from msprobe.pytorch.run_ut.inputs import RunUtError, TensorSource, Unreplayable, torch_dtype
from msprobe.pytorch.run_ut.replay import (
    Side,
    autocast_dtype,
    collect_tensor_values,
    is_inplace,
    resolve,
    skip_reason,
    split_name,
)

_WIDEN_FOR_NUMPY = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
_NO_GENERATION = np.random.default_rng(0)  # TensorSource draws from it only without files, never here


def current_device() -> torch.device:
    """Where the target's kernels are here: an Ascend NPU, else a CUDA GPU, else the CPU."""
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return torch.device("npu", torch.npu.current_device())  # type: ignore[attr-defined]
    except ImportError:
        pass
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class TorchReplay:
    """The :class:`~msprobe.core.compare.attribution.Replay` of PyTorch dumps."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.torch_device = device or current_device()
        self.device = str(self.torch_device)

    def __call__(self, request: ReplayRequest) -> list[np.ndarray] | str:
        prefix, api, _ = split_name(request.entry)
        refusal = skip_reason(prefix, api)
        if refusal:
            return refusal
        try:
            outputs = self._run(request, resolve(prefix, api))  # type: ignore[arg-type]
        except (Unreplayable, RunUtError) as exc:
            return f"cannot replay: {exc}"
        except Exception as exc:  # the API failed on these inputs: said on its row, the comparison goes on
            return f"replay failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return [_as_numpy(t) for t in outputs]

    def _run(self, request: ReplayRequest, func: Any) -> list[torch.Tensor]:
        inputs = request.inputs_record
        args_v, kwargs_v = inputs.get("input_args") or [], inputs.get("input_kwargs") or {}
        if not isinstance(args_v, list) or not isinstance(kwargs_v, dict):
            raise Unreplayable("input_args/input_kwargs are not a list and an object")
        input_values: list[dict] = []
        target_values: list[dict] = []
        collect_tensor_values([args_v, kwargs_v], input_values)
        target = request.target_record
        collect_tensor_values([target.get("input_args") or [], target.get("input_kwargs") or {}], target_values)
        if len(input_values) != len(target_values):
            raise Unreplayable(f"the target records {len(target_values)} input tensors, the bench "
                               f"{len(input_values)}")
        source = TensorSource(request.inputs_dir, 0, request.loader)
        base = [source.tensor(v, _NO_GENERATION).to(torch_dtype(t.get("dtype")))
                for v, t in zip(input_values, target_values)]
        side = Side(self.torch_device, base, [], autocast_dtype(request.target_record, base), upcast=False,
                     inplace=is_inplace(split_name(request.entry)[1]))
        _, flat = side.run(func, args_v, kwargs_v, grad=False)
        return [t for t in flat if isinstance(t, torch.Tensor)]


def _as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """On the CPU as numpy; bfloat16 and float8 widened to float32, which is exact."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in _WIDEN_FOR_NUMPY:
        tensor = tensor.float()
    return tensor.resolve_conj().numpy()
