"""PyTorch's half of replay attribution (``compare --attribute``, :mod:`msprobe.core.compare.judge.attribution`).

Each suspect is replayed by run_ut's core (:func:`~msprobe.pytorch.run_ut.call.replay_entry`) once, on the
current device, on the saved inputs of the bench or of the target, each tensor at the dtype the **target**
recorded for it; an API the target ran under autocast runs in its output dtype, as autocast did. What
cannot be replayed says why instead of failing the comparison (docs/compare.md).
"""

from __future__ import annotations

import numpy as np
import torch

from msprobe.core.compare.judge import ReplayRequest
from msprobe.pytorch.run_ut.call import Refused, replay_entry
from msprobe.pytorch.run_ut.inputs import RunUtError, TensorSource
from msprobe.pytorch.tensor_files import host_numpy

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
    """The :class:`~msprobe.core.compare.judge.attribution.Replay` of PyTorch dumps."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.torch_device = device or current_device()
        self.device = str(self.torch_device)

    def __call__(self, request: ReplayRequest) -> list[np.ndarray] | str:
        source = TensorSource(request.inputs_dir, 0, request.loader)
        try:  # a dump run_ut would refuse whole (a tensor without a data_name) costs one suspect here
            outcome = replay_entry(request.entry, request.inputs_record,
                                   lambda values: [source.tensor(v, _NO_GENERATION) for v in values],
                                   lambda call: call.run(self.torch_device).flat, at=request.target_record)
        except RunUtError as exc:
            return f"cannot replay: {exc}"
        if isinstance(outcome, Refused):
            return outcome.reason
        return [host_numpy(t) for t in outcome if isinstance(t, torch.Tensor)]
