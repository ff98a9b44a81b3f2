"""Task ``tensor`` on models we did not write: every file dump.json names holds the tensor the call saw.

The files are written by a background thread from copies taken at the call (msprobe.core.dump.tensor_writer),
while training goes on and changes tensors in place: AdamW updates every parameter inside the dumped
window, and the ResNet's ``ReLU(inplace=True)`` overwrites its input. A file written from the live
tensor instead of the copy would disagree with the statistics recorded at the call.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from zoo import ZOO, train

from msprobe.pytorch import PrecisionDebugger


def _records(value):
    if isinstance(value, dict) and "data_name" in value:
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _records(item)
    elif isinstance(value, list):
        for item in value:
            yield from _records(item)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [z for z in ZOO if z.name in ("llama", "inplace_resnet")], ids=lambda z: z.name)
def test_every_tensor_file_agrees_with_the_statistics_recorded_at_the_call(spec, tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1")
    train(spec, debugger, steps=2)
    checked = 0
    for rank in sorted((tmp_path / "dump").glob("step*/rank")):
        dump = json.loads((rank / "dump.json").read_text())
        assert {p.name for p in (rank / "dump_tensor_data").iterdir()} >= {
            r["data_name"] for entry in dump["data"].values() for r in _records(entry)}
        for entry in dump["data"].values():
            for record in _records(entry):
                saved = torch.load(rank / "dump_tensor_data" / record["data_name"], weights_only=True)
                assert str(saved.dtype) == record["dtype"] and list(saved.shape) == record["shape"]
                if record["Max"] is None or isinstance(record["Max"], bool) or not math.isfinite(record["Norm"]):
                    continue
                values = saved.double()
                assert values.max().item() == record["Max"] and values.min().item() == record["Min"]
                assert values.mean().item() == pytest.approx(record["Mean"], rel=1e-5, abs=1e-6)
                assert values.norm().item() == pytest.approx(record["Norm"], rel=1e-5, abs=1e-6)
                checked += 1
    assert checked > 200  # two steps of forward, backward and optimizer entries


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_batch_norm_running_statistics_are_read_at_every_call(task, tmp_path):
    """batch_norm updates its running statistics inside its kernel without moving their version counter,
    so nothing computed for them at one call (or step) may be reused at the next: here one BatchNorm
    runs twice per step, two steps."""
    def run(debugger=None):
        torch.manual_seed(0)
        bn = nn.BatchNorm1d(4)
        seen = []
        bn.register_forward_pre_hook(lambda module, args: seen.append(module.running_mean.clone()))
        for _ in range(2):
            if debugger is not None:
                debugger.start(bn)
            bn(bn(torch.randn(8, 4) * 3 + 1))
            if debugger is not None:
                debugger.stop()
                debugger.step()
        return seen

    expected = run()
    run(PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level="L1"))
    for index, running_mean in enumerate(expected):
        step, call = divmod(index, 2)
        rank = tmp_path / "dump" / f"step{step}" / "rank"
        record = json.loads((rank / "dump.json").read_text())["data"][f"Functional.batch_norm.{call}.forward"][
            "input_args"][1]
        reference = running_mean.double()
        assert record["Max"] == reference.max().item() and record["Min"] == reference.min().item()
        assert record["Mean"] == pytest.approx(reference.mean().item(), rel=1e-6, abs=1e-9)
        if task == "tensor":
            saved = torch.load(rank / "dump_tensor_data" / record["data_name"], weights_only=True)
            assert torch.equal(saved, running_mean)
