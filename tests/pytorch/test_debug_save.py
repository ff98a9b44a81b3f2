"""Level debug's ``PrecisionDebugger.save`` (docs/pytorch/dump.md#level-debug-save) and the parameters_grad
entries of levels L0 and mix (docs/dump_format.md#parameters_grad), on GPT-2 built by transformers from its
config: every number against float64 numpy of the tensors the training itself held, and the training bit
for bit that of a run without msprobe."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import parameters_grad_records, step_data, tensor_records, write_config
from stats_reference import close, reference
from zoo import ZOO, train

from msprobe.core.compare.api import run_compare
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.config import ConfigError
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.tensor_files import load_pt

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")
STATS = {"Max": "max", "Min": "min", "Mean": "mean", "Norm": "norm"}


def _debugger(tmp_path: Path, name: str, task: str, level: str, **section) -> PrecisionDebugger:
    return PrecisionDebugger(config_path=str(write_config(tmp_path, name, task, level, section)))


def _matches(record: dict, array: np.ndarray) -> bool:
    expected = reference(array)
    return list(record["shape"]) == list(array.shape) and all(
        close(record[key], expected[name], 1e-5) for key, name in STATS.items())


def _train_saving(debugger: PrecisionDebugger | None, steps: int = 2) -> tuple[list, list[dict]]:
    """GPT-2 AdamW steps saving a hidden state (with its gradient), the logits and loss in a nested dict
    with scalars, and the hidden state again without its gradient; returns (losses, parameters, the
    hidden state's gradients) and, per step, what the training held as float64 arrays."""
    torch.manual_seed(0)
    model = GPT2.build()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    held, outcome = [], []
    for _ in range(steps):
        (ids,) = GPT2.batch(gen)
        out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        hidden = out.hidden_states[1]
        hidden.retain_grad()
        if debugger is not None:
            debugger.save(hidden, "hidden")
            debugger.save({"logits": out.logits, "extra": [3, 0.5, "gpt2", (out.loss,)]}, "out")
            debugger.save(hidden, "hidden", save_backward=False)
        out.logits.retain_grad()
        out.loss.backward()
        held.append({name: t.detach().double().numpy().copy() for name, t in
                     (("hidden", hidden), ("hidden_grad", hidden.grad), ("logits", out.logits),
                      ("logits_grad", out.logits.grad), ("loss", out.loss))})
        outcome += [out.loss.detach().clone(), hidden.grad.clone()]
        optimizer.step()
        optimizer.zero_grad()
        if debugger is not None:
            debugger.step()
    outcome += [p.detach().clone() for p in model.parameters()]
    return outcome, held


def _debug_json(dump_path: Path, step: int) -> dict:
    return json.loads((dump_path / f"step{step}" / "rank" / "debug.json").read_text())


def test_saved_variables_and_their_gradients_are_those_gpt2_held(tmp_path):
    bare, _ = _train_saving(None)
    observed, held = _train_saving(_debugger(tmp_path, "dbg", "statistics", "debug"))
    assert all(torch.equal(a, b) for a, b in zip(bare, observed))  # the training bit for bit
    for step, arrays in enumerate(held):
        debug = _debug_json(tmp_path / "dbg", step)
        assert (debug["task"], debug["level"]) == ("statistics", "debug")
        data = debug["data"]
        assert set(data) == {"hidden.0.debug", "hidden_grad.0.debug", "out.0.debug", "out_grad.0.debug",
                             "hidden.1.debug"}  # no gradient of the save without save_backward
        assert _matches(data["hidden.0.debug"], arrays["hidden"])
        assert _matches(data["hidden.1.debug"], arrays["hidden"])
        assert _matches(data["hidden_grad.0.debug"], arrays["hidden_grad"])
        assert data["hidden_grad.0.debug"]["requires_grad"] is False
        out = data["out.0.debug"]
        assert _matches(out["logits"], arrays["logits"])
        assert out["extra"][:3] == [{"type": "int", "value": 3}, {"type": "float", "value": 0.5},
                                    {"type": "str", "value": "gpt2"}]
        assert _matches(out["extra"][3][0], arrays["loss"])
        grad = data["out_grad.0.debug"]
        assert _matches(grad["logits"], arrays["logits_grad"])
        assert grad["extra"][:3] == [None, None, None]  # scalars have no gradient


def test_task_tensor_writes_each_saved_tensor_to_its_file(tmp_path):
    _, held = _train_saving(_debugger(tmp_path, "dbgt", "tensor", "debug"), steps=1)
    rank = tmp_path / "dbgt" / "step0" / "rank"
    data = _debug_json(tmp_path / "dbgt", 0)["data"]
    files = {record["data_name"] for record in tensor_records(data)}
    assert {"hidden.0.debug.pt", "hidden_grad.0.debug.pt", "out.0.debug.logits.pt", "out.0.debug.extra.3.0.pt",
            "out_grad.0.debug.logits.pt", "hidden.1.debug.pt"} <= files
    for name, key in (("hidden.0.debug.pt", "hidden"), ("hidden_grad.0.debug.pt", "hidden_grad"),
                      ("out.0.debug.logits.pt", "logits"), ("out_grad.0.debug.logits.pt", "logits_grad")):
        assert np.array_equal(np.asarray(load_pt(rank / "dump_tensor_data" / name), dtype=np.float64), held[0][key])


def test_a_variable_without_a_gradient_gets_a_null_gradient_entry(tmp_path):
    debugger = _debugger(tmp_path, "nograd", "statistics", "debug")
    debugger.save(torch.ones(3), "plain")
    debugger.save(7, "number")
    debugger.step()
    data = _debug_json(tmp_path / "nograd", 0)["data"]
    assert data["plain_grad.0.debug"] is None and data["number_grad.0.debug"] is None
    assert data["number.0.debug"] == {"type": "int", "value": 7}


@pytest.mark.parametrize("task", ["overflow_check", "free_benchmark"])
def test_level_debug_is_refused_for_other_tasks_in_one_line(tmp_path, task):
    with pytest.raises(ConfigError) as error:
        _debugger(tmp_path, "refused", task, "debug")
    (line,) = [line for line in str(error.value).splitlines()[1:] if "'debug'" in line]
    assert "'debug'" in line and "'L1'" in line and "statistics and tensor" in line


def test_save_at_another_level_records_nothing_and_says_so_once(tmp_path, caplog):
    debugger = _debugger(tmp_path, "l1", "statistics", "L1")
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        debugger.save(torch.ones(2), "x")
        debugger.save(torch.ones(2), "x")
    assert sum("save records at level 'debug'" in r.getMessage() for r in caplog.records) == 1


def _one_backward(debugger: PrecisionDebugger | None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = GPT2.build()
    batch = GPT2.batch(torch.Generator().manual_seed(1))
    if debugger is not None:
        debugger.start(model)
    GPT2.loss(model, batch).backward()
    if debugger is not None:
        debugger.stop()
    return model


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_parameters_grad_entries_are_each_modules_gradients(tmp_path, level):
    model = _one_backward(_debugger(tmp_path, level, "statistics", level))
    data = step_data(tmp_path / level, 0)
    modules = [(path, module, {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad})
               for path, module in model.named_modules()]
    for record, param in parameters_grad_records(data, "Module", modules):
        assert _matches(record, param.grad.double().numpy())
    construct = json.loads((tmp_path / level / "step0" / "rank" / "construct.json").read_text())
    assert not any(".parameters_grad." in name for name in construct)


def test_parameters_grad_leaves_two_adamw_steps_bit_identical(tmp_path):
    reference_run = train(GPT2)
    observed = train(GPT2, _debugger(tmp_path, "l0", "statistics", "L0"))
    assert all((a is None and b is None) or torch.equal(a, b)
               for run_a, run_b in zip(reference_run, observed) for a, b in zip(run_a, run_b))
    assert any(".parameters_grad.1" in name for name in step_data(tmp_path / "l0", 1)) is False
    assert any(".parameters_grad.0" in name for name in step_data(tmp_path / "l0", 1))


def test_compare_rows_parameters_grad_entries_of_two_dumps(tmp_path):
    for name in ("a", "b"):
        _one_backward(_debugger(tmp_path, name, "statistics", "L0"))
    step = Path("step0") / "rank" / "dump.json"
    result = run_compare(load_pt, {"npu_path": tmp_path / "a" / step, "bench_path": tmp_path / "b" / step,
                                   "stack_path": None}, tmp_path / "report", CompareOptions(workers=1, progress=False))
    rows = [r for r in result.results if r.npu is not None and ".parameters_grad." in r.npu.name]
    assert {r.npu.name for r in rows} >= {"Module.transformer.h.0.mlp.c_fc.Conv1D.parameters_grad.0.weight.0"}
    assert all(r.bench is not None and r.bench.name == r.npu.name for r in rows)
    assert all(diff == 0 for r in rows for pair in r.stat_diffs for diff in pair if diff is not None)
