"""The dump controls of docs/config.md on real models nobody here wrote (the zoo of zoo.py): summary_mode
xor (docs/dump_format.md#xor-checksum), dump_enable switched while training runs
(docs/config.md#switching-capture-on-and-off-while-training-runs), the one warning of a config that selected
nothing (docs/config.md#when-nothing-is-dumped), task structure read by msprobe graph
(docs/graph.md#structure-dumps), risk_level and tensor_list (docs/config.md#risk_level-and-tensor_list), each
checked against an independent
computation, with the training's numbers bit for bit those of a run without msprobe."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import step_data, tensor_records, write_config
from stats_reference import close, reference, reference_xor
from torch_models import train_steps
from zoo import ZOO, train

from msprobe.core import cli
from msprobe.core.compare.api import run_compare
from msprobe.core.compare.judge.verdict import DIFFERENT, PASS
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.config import ConfigError
from msprobe.core.lifecycle.naming import parse_name
from msprobe.core.lifecycle.risk import CORE_APIS, LOW_RISK_APIS
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.tensor_files import load_pt

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")


def _debugger(tmp_path: Path, name: str, task: str, level: str, **section) -> PrecisionDebugger:
    return PrecisionDebugger(config_path=str(write_config(tmp_path, name, task, level, section)))


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
    xor_data, files_data = step_data(tmp_path / "xor", 1), step_data(tmp_path / "files", 1)
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
    # compare reads an xor dump as md5 mode: the same run passes everywhere, a second seed differs
    train(GPT2, _debugger(tmp_path, "xor_again", "statistics", "mix", summary_mode="xor"))
    train(GPT2, _debugger(tmp_path, "xor_seed", "statistics", "mix", summary_mode="xor"), seed=5)
    options = CompareOptions(workers=1, progress=False)
    paths = {"npu_path": tmp_path / "xor" / step / "dump.json", "stack_path": None}
    same = run_compare(load_pt, {**paths, "bench_path": tmp_path / "xor_again" / step / "dump.json"},
                       tmp_path / "same", options)
    other = run_compare(load_pt, {**paths, "bench_path": tmp_path / "xor_seed" / step / "dump.json"},
                        tmp_path / "other", options)
    assert same.mode == other.mode == "md5" and len(same.results) >= checked
    assert {r.verdict for r in same.results} == {PASS} and DIFFERENT in {r.verdict for r in other.results}


def _train_switched(debugger, config: Path | None, switches: dict[int, object], steps: int = 6):
    """GPT-2 trained ``steps`` AdamW steps; after step N's ``debugger.step()`` config.json's dump_enable
    becomes ``switches[N]``. Returns (losses, parameters, last gradients)."""

    def switch(step: int) -> None:
        if step in switches:
            settings = json.loads(config.read_text())
            settings["dump_enable"] = switches[step]
            config.write_text(json.dumps(settings))

    torch.manual_seed(0)
    model = GPT2.build()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    return train_steps(model, optimizer, lambda: GPT2.batch(gen), GPT2.loss, debugger, steps, after_step=switch)


def _steps(dump_path: Path) -> list[str]:
    return sorted(p.name for p in dump_path.iterdir() if p.name.startswith("step"))


def _switch_config(tmp_path: Path, enabled: object) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(tmp_path / "dump"),
                                  "dump_enable": enabled}))
    return config


def test_dump_enable_flipped_in_config_json_stops_and_restarts_capture_at_the_next_step(tmp_path, caplog):
    reference = _train_switched(None, None, {})
    config = _switch_config(tmp_path, True)
    debugger = PrecisionDebugger(config_path=str(config))
    with caplog.at_level(logging.INFO, logger="msprobe"):
        observed = _train_switched(debugger, config, {1: False, 3: True})
    assert _same_run(reference, observed)
    assert _steps(tmp_path / "dump") == ["step0", "step1", "step4", "step5"]
    for step in ("step0", "step4"):  # a step switched back on is dumped whole, counted from 0 as any step
        data = json.loads((tmp_path / "dump" / step / "rank" / "dump.json").read_text())["data"]
        assert "Module.transformer.GPT2Model.forward.0" in data and "Functional.linear.0.forward" in data
        assert any(".backward" in name for name in data)
    flips = [r.getMessage() for r in caplog.records if "dump_enable is now" in r.getMessage()]
    assert len(flips) == 2 and "false" in flips[0] and "true" in flips[1]


def test_a_bad_dump_enable_written_while_training_runs_changes_nothing_and_says_so(tmp_path, caplog):
    config = _switch_config(tmp_path, False)
    debugger = PrecisionDebugger(config_path=str(config))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        _train_switched(debugger, config, {0: "yes", 1: None, 2: True}, steps=4)
    # "yes" is refused (capture stays off), null keeps the state, true turns capture on from step 3
    assert _steps(tmp_path / "dump") == ["step3"]
    (warning,) = [r.getMessage() for r in caplog.records if "dump_enable" in r.getMessage()]
    assert "dump_enable: got 'yes'; allowed: true or false (a JSON boolean); capture stays off" in warning


def test_dump_enable_must_be_a_boolean_at_construction(tmp_path):
    with pytest.raises(ConfigError) as error:
        PrecisionDebugger(config_path=str(_switch_config(tmp_path, "on")))
    assert "dump_enable: got 'on'; allowed: true or false (a JSON boolean)" in str(error.value)


BERT = next(spec for spec in ZOO if spec.name == "bert")
EMPTY_CASES = {  # the config's keys → the start of the one warning line
    "rank": ({"rank": [3]}, "rank [3] selected nothing"),
    "step": ({"step": [100]}, "step [100] selected nothing (the run called start() in steps 0 to 1"),
    "scope": ({"statistics": {"scope": ["Torch.nothing.0.forward", "Torch.nothing.1.forward"]}},
              "scope ['Torch.nothing.0.forward', 'Torch.nothing.1.forward'] matched no call"),
    "list": ({"statistics": {"list": ["no_such_api", "Module.none.Linear.forward.0"]}},
             "list ['no_such_api', 'Module.none.Linear.forward.0'] matched no call"),
    "dump_enable": ({"dump_enable": False}, "dump_enable was false in every selected step"),
    "nothing missing": ({"statistics": {"list": ["linear"]}}, None),
}


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_a_config_that_selected_nothing_ends_with_one_warning_naming_its_key(tmp_path, caplog, case):
    settings, expected = EMPTY_CASES[case]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "level": "mix", "dump_path": str(tmp_path / "dump"),
                                  **settings}))
    debugger = PrecisionDebugger(config_path=str(config))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        observed = train(BERT, debugger)
        debugger.finish()
        debugger.finish()  # said once
    assert _same_run(train(BERT), observed)
    warnings = [r.getMessage() for r in caplog.records if "msprobe dumped nothing" in r.getMessage()]
    if expected is None:
        assert warnings == [] and _steps(tmp_path / "dump") == ["step0", "step1"]
    else:
        assert len(warnings) == 1 and warnings[0].startswith(f"msprobe dumped nothing: {expected}"), warnings
        dumps = list((tmp_path / "dump").glob("step*/*/dump.json"))
        assert not any(json.loads(dump.read_text())["data"] for dump in dumps)  # it was empty indeed


def test_a_structure_dump_holds_every_call_and_msprobe_graph_draws_it(tmp_path):
    structure = _debugger(tmp_path, "structure", "structure", "mix")
    assert _same_run(train(BERT), train(BERT, structure))
    train(BERT, _debugger(tmp_path, "statistics", "statistics", "mix"))  # what a full dump holds, to compare
    rank = Path("step1") / "rank"
    assert sorted(p.name for p in (tmp_path / "structure" / rank).iterdir()) == \
        ["construct.json", "dump.json", "stack.json"]
    assert json.loads((tmp_path / "structure" / rank / "dump.json").read_text())["data"] == {}
    construct = json.loads((tmp_path / "structure" / rank / "construct.json").read_text())
    full = json.loads((tmp_path / "statistics" / rank / "dump.json").read_text())["data"]
    calls = [name for name in full if ".parameters_grad." not in name]  # gradients of parameters: not calls
    assert list(construct) == calls  # every call, in the order it ran...
    assert construct == json.loads((tmp_path / "statistics" / rank / "construct.json").read_text())  # ...placed
    stacks = json.loads((tmp_path / "structure" / rank / "stack.json").read_text())
    full_stacks = json.loads((tmp_path / "statistics" / rank / "stack.json").read_text())
    assert set(stacks) == set(full_stacks)
    assert all(any("zoo.py" in frame for frame in stacks[name]) for name in stacks if name.startswith("Module."))
    graph_input = tmp_path / "input.json"
    graph_input.write_text(json.dumps({"npu_path": str(tmp_path / "structure" / rank)}))
    assert cli.main(["-f", "pytorch", "graph", "-i", str(graph_input), "-o", str(tmp_path / "graph")]) == 0
    (vis,) = (tmp_path / "graph").glob("*.vis")
    nodes = json.loads(vis.read_text())["node"]
    assert {name for name in construct if name.startswith("Module.")} <= set(nodes)
    modules = [name for name in construct if name.startswith("Module.") and ".forward." in name]
    assert all(nodes[name]["upnode"] == (construct[name] or "DefaultModel") for name in modules)


LLAMA = next(spec for spec in ZOO if spec.name == "llama")


def _dumped(tmp_path: Path, name: str, level: str = "L1", **common) -> tuple[dict, Path]:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"task": "statistics", "level": level, "dump_path": str(tmp_path / name),
                                  **common}))
    assert _same_run(train(LLAMA), train(LLAMA, PrecisionDebugger(config_path=str(config))))
    rank = tmp_path / name / "step1" / "rank"
    return json.loads((rank / "dump.json").read_text())["data"], rank


def test_risk_level_keeps_the_calls_of_its_level_and_every_module(tmp_path):
    every, _ = _dumped(tmp_path, "all", "mix")
    # a module's parameters_grad entry is kept with its module (docs/dump_format.md#parameters_grad)
    kinds = {name: parse_name(name.replace(".parameters_grad.", ".forward.")) for name in every}
    focus, _ = _dumped(tmp_path, "focus", "mix", risk_level="FOCUS")
    assert list(focus) == [n for n in every if kinds[n].is_module or kinds[n].api not in LOW_RISK_APIS]
    assert len(focus) < len(every) and any(kinds[n].is_module for n in focus)
    core, _ = _dumped(tmp_path, "core", "mix", risk_level="CORE")
    assert list(core) == [n for n in every if kinds[n].is_module or kinds[n].api in CORE_APIS]
    assert {kinds[n].api for n in core if not kinds[n].is_module} >= {"linear", "embedding", "matmul"}
    extended, _ = _dumped(tmp_path, "extended", "mix", risk_level="FOCUS", low_risk_apis=["mul", "__mul__"])
    assert list(extended) == [n for n in focus if kinds[n].api not in ("mul", "__mul__")]
    assert any(kinds[n].api in ("mul", "__mul__") for n in focus)


def test_tensor_list_saves_the_listed_apis_tensors_and_statistics_for_the_rest(tmp_path):
    data, rank = _dumped(tmp_path, "listed", statistics={"tensor_list": ["linear"]})
    saved = 0
    for name, entry in data.items():
        for record in tensor_records(entry):
            assert ("data_name" in record) == (parse_name(name).api == "linear"), (name, record)
            if "data_name" in record:
                values = torch.load(rank / "dump_tensor_data" / record["data_name"], weights_only=True).numpy()
                want = reference(values)
                assert all(close(record[key], want[key.lower()], 1e-6) for key in ("Max", "Min", "Mean", "Norm"))
                saved += 1
    assert saved > 50 and {p.name for p in (rank / "dump_tensor_data").iterdir()} == {
        record["data_name"] for entry in data.values() for record in tensor_records(entry) if "data_name" in record}


@pytest.mark.parametrize(("settings", "problem"), [
    ({"risk_level": "HIGH"}, "risk_level: got 'HIGH'; allowed: one of 'CORE', 'FOCUS', 'ALL'"),
    ({"low_risk_apis": "mul"}, "low_risk_apis: got 'mul'; allowed: a list of strings"),
    ({"statistics": {"tensor_list": [3]}}, "statistics.tensor_list[0]: got 3; allowed: a non-empty string"),
])
def test_risk_level_low_risk_apis_and_tensor_list_are_checked_at_construction(tmp_path, settings, problem):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), **settings}))
    with pytest.raises(ConfigError) as error:
        PrecisionDebugger(config_path=str(config))
    assert problem in str(error.value)
