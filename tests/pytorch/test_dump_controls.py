"""The dump controls of docs/config.md on real models nobody here wrote (the zoo of zoo.py): summary_mode
xor (docs/dump_format.md#xor-checksum), each checked against an independent computation, with the
training's numbers bit for bit those of a run without msprobe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from dump_json import tensor_records
from stats_reference import reference_xor
from zoo import ZOO, train

from msprobe.pytorch import PrecisionDebugger

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")


def _debugger(tmp_path: Path, name: str, task: str, level: str, **section) -> PrecisionDebugger:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"task": task, "level": level, "dump_path": str(tmp_path / name), task: section}))
    return PrecisionDebugger(config_path=str(config))


def _same_run(expected, observed) -> bool:
    """Losses, parameters and last gradients bit for bit."""
    return all(
        (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
        for run_a, run_b in zip(expected, observed) for a, b in zip(run_a, run_b)
    )


def test_xor_checksums_of_gpt2_are_those_of_its_tensor_files_bytes(tmp_path):
    reference = train(GPT2)
    assert _same_run(reference, train(GPT2, _debugger(tmp_path, "xor", "statistics", "mix", summary_mode="xor")))
    train(GPT2, _debugger(tmp_path, "files", "tensor", "mix"))
    step = Path("step1") / "rank"
    xor_data = json.loads((tmp_path / "xor" / step / "dump.json").read_text())["data"]
    files_data = json.loads((tmp_path / "files" / step / "dump.json").read_text())["data"]
    assert list(xor_data) == list(files_data) and any(".backward" in name for name in xor_data)
    checked = 0
    pairs = list(zip(tensor_records(xor_data), tensor_records(files_data), strict=True))
    for xor_record, files_record in pairs:
        assert "Max" not in xor_record and "Norm" not in xor_record, xor_record
        saved = torch.load(tmp_path / "files" / step / "dump_tensor_data" / files_record["data_name"],
                           weights_only=True)
        raw = saved.numpy().tobytes() if saved.dtype != torch.bfloat16 else saved.view(torch.int16).numpy().tobytes()
        assert xor_record["md5"] == reference_xor(raw), files_record["data_name"]
        checked += 1
    assert checked > 500  # every tensor of a GPT-2 step, forward and backward, modules and APIs
    assert np.unique([record["md5"] for record, _ in pairs]).size > 100
