"""config_check's MindSpore half: MindSpore's facts, seed, weights, batches and random APIs, and ``.ckpt``
checkpoints (docs/config_check.md#mindspore). The pack, its compare and the reports are msprobe.core's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

import mindspore
from msprobe.core.config_check.checkpoint import CheckpointError, Tensor
from msprobe.core.config_check.collect import AdapterProbe, ConfigCheckerBase
from msprobe.core.config_check.randomness import RandomCalls
from msprobe.mindspore.adapter import MindSporeTensorAdapter
from msprobe.mindspore.rank import current_rank

OPS_RANDOM = ("standard_normal", "uniform", "randint", "randn", "rand", "rand_like", "randn_like", "randint_like",
              "multinomial", "bernoulli", "gamma", "poisson", "randperm", "normal")
MINT_RANDOM = ("rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "rand_like",
               "randn_like", "randint_like")
CONTEXT_KEYS = ("mode", "device_target", "deterministic", "jit_level", "max_call_depth")


def _context(key: str) -> Any:
    try:
        return mindspore.get_context(key)
    except (ValueError, RuntimeError, TypeError, AttributeError):
        return None


class MindSporeProbe(AdapterProbe):
    """What config_check reads of MindSpore (the FrameworkProbe of msprobe.core.config_check.collect)."""

    name = "mindspore"

    def __init__(self) -> None:
        super().__init__(MindSporeTensorAdapter())

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"mindspore": mindspore.__version__, "python": sys.version.split()[0]}
        facts.update({f"context.{key}": _context(key) for key in CONTEXT_KEYS})
        return {key: value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
                for key, value in facts.items()}

    def seeds(self) -> dict[str, Any]:
        return {"mindspore.get_seed": mindspore.get_seed()}

    def track_random(self, calls: RandomCalls) -> None:
        calls.track(mindspore.ops, OPS_RANDOM, "mindspore.ops")
        calls.track(mindspore.mint, MINT_RANDOM, "mindspore.mint")
        calls.track(mindspore, ("set_seed",), "mindspore")

    def named_tensors(self, model: mindspore.nn.Cell) -> Any:
        return model.parameters_and_names()

    def before_forward(self, model: mindspore.nn.Cell, call: Any) -> Any:
        return model.register_forward_pre_hook(lambda _cell, args: call(args, {}))

    def rank(self) -> int | None:
        return current_rank()


class ConfigChecker(ConfigCheckerBase):
    """``ConfigChecker(model=..., output_zip_path=...)`` for MindSpore (docs/config_check.md#mindspore)."""

    probe_class = MindSporeProbe


def load_mindspore_checkpoint(path: Path) -> dict[str, Tensor]:
    """A ``.ckpt`` file (``mindspore.save_checkpoint``), every parameter read to the host as float64."""
    try:
        params = mindspore.load_checkpoint(str(path))
    except Exception as error:  # MindSpore raises several kinds for a file it cannot read
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read by MindSpore: {error}") from None
    tensors = {}
    for name, param in params.items():
        values = param.astype(mindspore.float32) if param.dtype == mindspore.bfloat16 else param
        array = np.asarray(values.asnumpy())
        tensors[name] = Tensor(str(param.dtype), tuple(param.shape), array.astype(np.float64))
    return tensors
