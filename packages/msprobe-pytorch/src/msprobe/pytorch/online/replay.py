"""One online record replayed by run_ut's engine, in a worker process of the receiver.

A record is a dump.json entry whose tensors' ``data_name`` name tensors of the message instead of
files, so the offline :class:`~msprobe.pytorch.run_ut.replay.Replayer` judges it unchanged; only where
its tensors come from differs (:class:`RecordTensors` in place of the tensor files).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from msprobe.core.online import wire
from msprobe.core.online.wire import WireError, WireTensor
from msprobe.core.run_ut.replay_common import select_apis
from msprobe.pytorch.online.tensors import from_wire
from msprobe.pytorch.run_ut.call import api_table
from msprobe.pytorch.run_ut.inputs import RunUtError, torch_dtype
from msprobe.pytorch.run_ut.replay import DEFAULT_SEED, Replayer, check_device


class RecordTensors:
    """The tensors of one record (forward and backward messages), by ``data_name``."""

    def __init__(self, tensors: dict[str, WireTensor]) -> None:
        self.tensors = tensors

    def tensor(self, value: dict, rng: np.random.Generator) -> torch.Tensor:
        item = self.tensors.get(value.get("data_name"))
        if item is None:
            raise RunUtError(f"the record names a tensor it does not carry ({value.get('data_name')!r})")
        tensor = from_wire(item)
        if tensor.dtype != torch_dtype(value.get("dtype")) or list(tensor.shape) != value.get("shape"):
            raise RunUtError(f"tensor {item.name!r}: its description and its bytes disagree")
        return tensor


class RecordReplayer:
    """The offline replayer with no dump behind it: each record brings its own tensors."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def replay(self, forward: wire.Message, backward: wire.Message | None) -> Any:
        tensors = {t.name: t for t in forward.tensors}
        if backward is not None:
            tensors.update({t.name: t for t in backward.tensors})
        replayer = Replayer(RecordTensors(tensors), self.device, DEFAULT_SEED)
        back_entry = backward.meta.get("entry") if backward is not None else None
        return replayer.check(forward.meta["name"], forward.meta["entry"],
                              back_entry if isinstance(back_entry, dict) else None)


_REPLAYERS: dict[str, RecordReplayer] = {}


def warm_up(device: str | None = None) -> None:
    """Worker start: one thread per process (the pool has one process per CPU), and the table of replayable APIs
    built now, not at the first record that needs it (it imports torch's Dynamo: 0.5 to 1.2 s on the 2-CPU
    development machine, docs/scale.md); a Ray actor holding an accelerator is given its ``device``, checked here,
    before any record comes."""
    torch.set_num_threads(1)
    api_table()
    if device is not None:
        check_device(device)


def replay_frames(forward: bytes, backward: bytes | None, *, device: str, max_message_mb: int,
                  white_list: tuple[str, ...] = (), black_list: tuple[str, ...] = ()) -> Any:
    """The :class:`~msprobe.core.run_ut.report.ApiRow` of a forward record and its backward record, or
    None when the config's white/black lists leave the API out."""
    limits = wire.Limits.from_megabytes(max_message_mb)
    fwd = wire.decode(forward, limits)
    bwd = wire.decode(backward, limits) if backward is not None else None
    name, entry = fwd.meta.get("name"), fwd.meta.get("entry")
    if not isinstance(name, str) or not isinstance(entry, dict):
        raise WireError("a forward record without name and entry")
    if not select_apis({name: entry}, white_list=white_list, black_list=black_list):
        return None
    replayer = _REPLAYERS.get(device)
    if replayer is None:
        replayer = _REPLAYERS[device] = RecordReplayer(check_device(device))
    return replayer.replay(fwd, bwd)
