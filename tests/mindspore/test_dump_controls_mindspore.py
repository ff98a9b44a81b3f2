"""The dump controls of docs/config.md on MindSpore models nobody here wrote (``zoo_ms.py``), as
tests/pytorch/test_dump_controls.py checks them on PyTorch: summary_mode xor against an independent
computation, and the one warning of a config that selected nothing (docs/config.md#when-nothing-is-dumped),
with the training's numbers bit for bit those of a run without msprobe."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import step_data, tensor_records, write_config  # noqa: E402
from stats_reference import reference_xor  # noqa: E402
from zoo_ms import ZOO, train  # noqa: E402

from msprobe.core.lifecycle.naming import parse_name  # noqa: E402
from msprobe.core.lifecycle.risk import LOW_RISK_APIS  # noqa: E402
from msprobe.mindspore import PrecisionDebugger  # noqa: E402

LLAMA = next(spec for spec in ZOO if spec.name == "llama")


def _debugger(tmp_path: Path, name: str, task: str, level: str, **section) -> PrecisionDebugger:
    return PrecisionDebugger(config_path=str(write_config(tmp_path, name, task, level, section)))


def _same_run(expected, observed) -> bool:
    return all(np.array_equal(a, b) for run_a, run_b in zip(expected, observed) for a, b in zip(run_a, run_b))


def test_xor_checksums_of_llama_are_those_of_its_tensor_files_bytes(tmp_path):
    reference = train(LLAMA)
    assert _same_run(reference, train(LLAMA, _debugger(tmp_path, "xor", "statistics", "mix", summary_mode="xor")))
    # The files: at L1 (the API entries of mix are L1's), of step 0's forward. A later run in this process
    # does not repeat the first one's gradients bit for bit after a debugger ran at mix (MindSpore 2.10 on
    # the CPU; a plain run shows it too), so only what precedes the first backward is the same in both runs.
    train(LLAMA, _debugger(tmp_path, "files", "tensor", "L1"))
    step = Path("step0") / "rank"
    xor_data = step_data(tmp_path / "xor", 0)
    assert any(".backward" in name for name in xor_data)
    files_data = step_data(tmp_path / "files", 0)
    files_data = {name: entry for name, entry in files_data.items() if name.endswith(".forward")}
    xor_data = {name: xor_data[name] for name in files_data}
    pairs = list(zip(tensor_records(xor_data), tensor_records(files_data), strict=True))
    for xor_record, files_record in pairs:
        assert "Max" not in xor_record and "Norm" not in xor_record, xor_record
        saved = np.load(tmp_path / "files" / step / "dump_tensor_data" / files_record["data_name"])
        assert xor_record["md5"] == reference_xor(saved.tobytes()), files_record["data_name"]
    assert len(pairs) > 100
    assert np.unique([record["md5"] for record, _ in pairs]).size > 50


EMPTY_CASES = {  # the config's keys → the start of the one warning line
    "rank": ({"rank": [2]}, "rank [2] selected nothing"),
    "step": ({"step": [7]}, "step [7] selected nothing"),
    "list": ({"statistics": {"list": ["no_such_api"]}}, "list ['no_such_api'] matched no call"),
    "dump_enable": ({"dump_enable": False}, "dump_enable was false in every selected step"),
}


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_a_config_that_selected_nothing_ends_with_one_warning_naming_its_key(tmp_path, caplog, case):
    settings, expected = EMPTY_CASES[case]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(tmp_path / "dump"),
                                  **settings}))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        train(LLAMA, PrecisionDebugger(config_path=str(config)))  # it calls finish()
    warnings = [r.getMessage() for r in caplog.records if "msprobe dumped nothing" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"msprobe dumped nothing: {expected}"), warnings


def _dumped(tmp_path: Path, name: str, **settings) -> tuple[dict, Path]:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(tmp_path / name),
                                  **settings}))
    train(LLAMA, PrecisionDebugger(config_path=str(config)))
    rank = tmp_path / name / "step0" / "rank"
    return json.loads((rank / "dump.json").read_text())["data"], rank


def test_risk_level_focus_and_tensor_list_on_llama(tmp_path):
    every, _ = _dumped(tmp_path, "all")
    # a cell's parameters_grad entry is kept with its cell (docs/dump_format.md#parameters_grad)
    kinds = {name: parse_name(name.replace(".parameters_grad.", ".forward.")) for name in every}
    focus, _ = _dumped(tmp_path, "focus", risk_level="FOCUS")
    assert list(focus) == [n for n in every if kinds[n].is_module or kinds[n].api not in LOW_RISK_APIS]
    assert len(focus) < len(every)
    listed, rank = _dumped(tmp_path, "listed", statistics={"tensor_list": ["matmul"]})
    saved = [record for name, entry in listed.items() for record in tensor_records(entry) if "data_name" in record]
    assert saved and all(".matmul." in record["data_name"] for record in saved)
    for record in saved:
        values = np.load(rank / "dump_tensor_data" / record["data_name"]).astype(np.float64)
        assert record["Max"] == values.max() and record["Min"] == values.min()
