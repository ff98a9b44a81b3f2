"""A DataLoader whose workers are forked while the debugger collects (the loader made inside the
start/stop window): the workers run the dataset's code, not the training's, so their copies of the
debugger record nothing, and their copies of the tensor writer (whose lock the parent's writer thread may
have held at the fork) start afresh."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.pytorch import PrecisionDebugger

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork only")


class Probe(Dataset):
    """Each item says whether this process's debugger would record calls (1: silenced)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        session = BaseDebugger._active._runner
        return torch.ones(2) * float(session.sink.failed) + index  # torch calls, recorded unless silenced


def test_workers_forked_inside_the_window_record_nothing(tmp_path, capfd):
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1")
    for _ in range(2):
        debugger.start(model)
        batches = list(DataLoader(Probe(), batch_size=4, num_workers=2, multiprocessing_context="fork"))
        for batch in batches:
            model(batch).sum().backward()
        debugger.stop()
        debugger.step()
    debugger.finish()

    silenced = torch.cat(batches) - torch.arange(8.0).unsqueeze(1)
    assert torch.equal(silenced, torch.ones(8, 2))  # in the workers, every call was a no-op
    assert BaseDebugger._active is None or not BaseDebugger._active._runner.sink.failed  # not in the parent
    for step in (0, 1):
        rank = tmp_path / "dump" / f"step{step}" / "rank"
        data = json.loads((rank / "dump.json").read_text())["data"]
        assert "Functional.linear.1.forward" in data and not any(name.startswith("Tensor.__add__") for name in data)
        names = {r["data_name"] for entry in data.values() for part in entry.values() if isinstance(part, list)
                 for r in part if isinstance(r, dict) and "data_name" in r}
        assert names <= {p.name for p in (rank / "dump_tensor_data").iterdir()}
    assert not [p for p in (tmp_path / "dump").rglob("*.tmp")]
    assert "cannot show values" not in capfd.readouterr().err
