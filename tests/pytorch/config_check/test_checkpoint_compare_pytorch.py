"""Checkpoint compare on real torch checkpoints: a state_dict file and a torch.distributed.checkpoint
directory; relative differences checked against float64 numpy (docs/config_check.md#checkpoint-compare)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp

from msprobe.core.cli import main
from msprobe.core.config_check.checkpoint import compare_checkpoints
from msprobe.pytorch.config_check import load_torch_checkpoint


def _states():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    a = {k: v.clone() for k, v in model.state_dict().items()}
    b = {k: v.clone() for k, v in a.items()}
    b["0.weight"][0, 1] += 0.5
    b["1.bias"] = b["1.bias"].to(torch.bfloat16)
    del b["1.weight"]
    b["extra"] = torch.ones(2)
    return a, b


def _check(rows, a):
    by_key = {r.cells[0]: r.cells for r in rows}
    left = a["0.weight"].double().numpy()
    moved = left.copy()
    moved[0, 1] = np.float32(a["0.weight"][0, 1].item() + 0.5)
    reference = np.linalg.norm(moved - left) / np.linalg.norm(left)
    assert by_key["0.weight"][1] == "values differ" and float(by_key["0.weight"][6]) == pytest.approx(reference)
    assert by_key["1.bias"][1].startswith("dtype") and by_key["1.bias"][3] == "bfloat16"
    assert by_key["1.weight"][1] == "missing in B" and by_key["extra"][1] == "missing in A"
    assert by_key["0.bias"][1] == "equal"


def test_state_dict_files(tmp_path):
    a, b = _states()
    torch.save({"model": a}, tmp_path / "a.pt")
    torch.save({"model": b}, tmp_path / "b.pt")
    rows = compare_checkpoints(load_torch_checkpoint(tmp_path / "a.pt"), load_torch_checkpoint(tmp_path / "b.pt"))
    _check([type(r)(r.section, (r.cells[0].removeprefix("model."), *r.cells[1:]), r.changes_numbers)
            for r in rows], a)


def test_distributed_checkpoint_directories_and_command(tmp_path, capsys):
    a, b = _states()
    dcp.save(a, checkpoint_id=str(tmp_path / "dcp_a"), no_dist=True)
    dcp.save(b, checkpoint_id=str(tmp_path / "dcp_b"), no_dist=True)
    _check(compare_checkpoints(load_torch_checkpoint(tmp_path / "dcp_a"), load_torch_checkpoint(tmp_path / "dcp_b")), a)
    assert main(["-f", "pytorch", "config_check", "-c", str(tmp_path / "dcp_a"), str(tmp_path / "dcp_b"),
                 "-o", str(tmp_path / "out")]) == 0
    assert "checkpoint: 4 difference(s)" in capsys.readouterr().out
    assert (tmp_path / "out" / "checkpoint_compare_result.xlsx").is_file()
