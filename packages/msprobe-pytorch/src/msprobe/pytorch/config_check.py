"""config_check's PyTorch half: the facts, seeds, weights, batches and random APIs of torch, and torch
checkpoints (docs/config_check.md). The pack, its compare and the reports are msprobe.core.config_check's."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from msprobe.core.config_check.checkpoint import CheckpointError, Tensor
from msprobe.core.config_check.collect import AdapterProbe, ConfigCheckerBase
from msprobe.core.config_check.randomness import RandomCalls
from msprobe.pytorch.adapter import TorchTensorAdapter

RANDOM_FUNCTIONS = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                    "bernoulli", "multinomial", "poisson", "manual_seed", "seed")
RANDOM_METHODS = ("uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "log_normal_",
                  "cauchy_")


def _optional(read: Any) -> Any:
    try:
        return read()
    except (AttributeError, RuntimeError, AssertionError):
        return None


class TorchProbe(AdapterProbe):
    """What config_check reads of torch (the FrameworkProbe of msprobe.core.config_check.collect)."""

    name = "pytorch"

    def __init__(self) -> None:
        super().__init__(TorchTensorAdapter())

    def facts(self) -> dict[str, Any]:
        backends = torch.backends
        facts = {
            "torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn.deterministic": backends.cudnn.deterministic, "cudnn.benchmark": backends.cudnn.benchmark,
            "cudnn.allow_tf32": backends.cudnn.allow_tf32, "cudnn.version": _optional(backends.cudnn.version),
            "matmul.allow_tf32": backends.cuda.matmul.allow_tf32,
            "matmul.allow_fp16_reduced_precision_reduction":
                backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "matmul.allow_bf16_reduced_precision_reduction":
                backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "mkldnn.enabled": backends.mkldnn.enabled, "default_dtype": str(torch.get_default_dtype()),
            "num_threads": torch.get_num_threads(), "num_interop_threads": torch.get_num_interop_threads(),
            "python": sys.version.split()[0],
        }
        npu = sys.modules.get("torch_npu")
        if npu is not None:
            facts["torch_npu"] = getattr(npu, "__version__", None)
        return facts

    def seeds(self) -> dict[str, Any]:
        return {"torch.initial_seed": torch.initial_seed()}

    def track_random(self, calls: RandomCalls) -> None:
        calls.track(torch, RANDOM_FUNCTIONS, "torch")
        calls.track(torch.Tensor, RANDOM_METHODS, "torch.Tensor")
        calls.track(torch.cuda, ("manual_seed", "manual_seed_all"), "torch.cuda")

    def named_tensors(self, model: torch.nn.Module) -> Any:
        return model.state_dict(keep_vars=True).items()

    def before_forward(self, model: torch.nn.Module, call: Any) -> Any:
        return model.register_forward_pre_hook(lambda _module, args, kwargs: call(args, kwargs), with_kwargs=True)

    def rank(self) -> int | None:
        distributed = torch.distributed
        return distributed.get_rank() if distributed.is_available() and distributed.is_initialized() else None


class ConfigChecker(ConfigCheckerBase):
    """``ConfigChecker(model=..., output_zip_path=...)`` for PyTorch (docs/config_check.md)."""

    probe_class = TorchProbe


def _flatten(value: Any, prefix: str, out: dict[str, torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        out[prefix] = value
    elif isinstance(value, dict):
        for key, inner in value.items():
            _flatten(inner, f"{prefix}.{key}" if prefix else str(key), out)


def _as_tensor(name: str, tensor: torch.Tensor) -> Tensor:
    plain = tensor.detach().cpu()
    values = plain.to(torch.float64) if not plain.is_complex() else plain.abs().to(torch.float64)
    return Tensor(str(plain.dtype).replace("torch.", ""), tuple(plain.shape), values.numpy())


def load_torch_checkpoint(path: Path) -> dict[str, Tensor]:
    """A state_dict file (``torch.save``, nested dicts flattened with dots) or a distributed checkpoint
    directory (``torch.distributed.checkpoint``), read on the CPU with ``weights_only``."""
    try:
        if path.is_dir():
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

            with tempfile.TemporaryDirectory() as scratch:
                single = Path(scratch) / "state.pt"
                dcp_to_torch_save(path, single)
                state = torch.load(single, map_location="cpu", weights_only=True)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file it cannot read
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read by torch: {error}") from None
    tensors: dict[str, torch.Tensor] = {}
    _flatten(state, "", tensors)
    if not tensors:
        raise CheckpointError(f"checkpoint {str(path)!r} holds no tensors (a state_dict is expected)")
    return {name: _as_tensor(name, t) for name, t in tensors.items()}
