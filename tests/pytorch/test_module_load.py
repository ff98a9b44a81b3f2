"""Module input replay, config key ``load`` (docs/config.md#load), on GPT-2 built by transformers: a clean fp32
tensor dump, then a run with an upstream weight changed, where ``load`` feeds ``transformer.h.1`` the clean
run's inputs — its output is the clean run's again, checked in float64 numpy; shape mismatches and bad
configs are one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import (
    assert_dumped_the_loaded_input,
    assert_load_cuts_off_upstream,
    assert_mismatch_refused,
    framed_step,
    load_config,
    write_config,
)
from zoo import ZOO

from msprobe.core.config import ConfigError
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.training.load_inputs import LoadMismatch

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")
BLOCK = "Module.transformer.h.1.GPT2Block.forward.0"


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return GPT2.build().eval()


def _ids(length: int = 12) -> torch.Tensor:
    return torch.randint(0, 96, (2, length), generator=torch.Generator().manual_seed(1))


def _run(model: torch.nn.Module, debugger: PrecisionDebugger | None, ids: torch.Tensor) -> dict[str, np.ndarray]:
    """One forward; the outputs of both blocks as float64 numpy, seen by our own forward hooks."""
    seen: dict[str, np.ndarray] = {}
    hooks = [model.transformer.h[i].register_forward_hook(
        lambda _m, _a, out, i=i: seen.__setitem__(f"h{i}", out[0].detach().double().numpy())) for i in (0, 1)]
    with torch.no_grad():
        framed_step(debugger, model, lambda: model(ids), hooks)
    return seen


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    base = tmp_path_factory.mktemp("load")
    debugger = PrecisionDebugger(config_path=str(write_config(base, "clean", "tensor", "L0", {})))
    outputs = _run(_model(), debugger, _ids())
    debugger.finish()
    return base / "clean", outputs


def _perturbed() -> torch.nn.Module:
    model = _model()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight.mul_(1.05)  # upstream of h.1: its inputs change
    return model


def test_loaded_module_computes_the_clean_output(clean, tmp_path):
    source, expected = clean
    assert_load_cuts_off_upstream(PrecisionDebugger, lambda debugger: _run(_perturbed(), debugger, _ids()), source,
                                  expected, tmp_path, BLOCK, upstream="h0", loaded="h1")


def test_dump_after_load_records_the_loaded_inputs(clean, tmp_path):
    source, _ = clean
    load = {"path": str(source), "modules": [BLOCK], "dump_after_load": True}
    debugger = PrecisionDebugger(config_path=load_config(tmp_path, "after", load))
    _run(_perturbed(), debugger, _ids())
    debugger.finish()
    assert_dumped_the_loaded_input(source, tmp_path / "after", BLOCK, lambda file: torch.load(file).double().numpy())


def test_a_shape_mismatch_is_refused_in_one_line(clean, tmp_path):
    source, _ = clean
    assert_mismatch_refused(PrecisionDebugger, lambda debugger: _run(_perturbed(), debugger, _ids(length=8)), source,
                            tmp_path, BLOCK, LoadMismatch, "[2, 12, 32]", "[2, 8, 32]")


@pytest.mark.parametrize(("load", "expected"), [
    ({"modules": [BLOCK]}, "load.path: got nothing"),
    ({"path": "/nonexistent/dump", "modules": [BLOCK]}, "load.path: got '/nonexistent/dump'"),
    ({"path": "SOURCE", "modules": ["Module.transformer.h.7.GPT2Block.forward.0"]}, "load.modules[0]"),
    ({"path": "SOURCE", "modules": ["Functional.linear.0.forward"]}, "a module forward entry name"),
    ({"path": "SOURCE", "modules": [BLOCK], "dump_after_load": "yes"}, "load.dump_after_load"),
])
def test_bad_load_configs_fail_at_construction(clean, tmp_path, load, expected):
    source, _ = clean
    load = {key: str(source) if value == "SOURCE" else value for key, value in load.items()}
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        PrecisionDebugger(config_path=load_config(tmp_path, "bad", load))


def test_a_statistics_dump_cannot_be_loaded(tmp_path):
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "stats", "statistics", "L0", {})))
    _run(_model(), debugger, _ids())
    debugger.finish()
    with pytest.raises(ConfigError, match="task tensor"):
        PrecisionDebugger(config_path=load_config(tmp_path, "x", {"path": str(tmp_path / "stats"),
                                                                   "modules": [BLOCK]}))


def test_backward_runs_through_the_loaded_module_and_stops_there(clean, tmp_path):
    source, _ = clean
    model = _perturbed().train()
    debugger = PrecisionDebugger(config_path=load_config(tmp_path, "grad", {"path": str(source), "modules": [BLOCK]}))
    debugger.start(model)
    model(_ids(), labels=_ids()).loss.backward()
    debugger.stop()
    debugger.finish()
    assert model.transformer.h[1].mlp.c_fc.weight.grad is not None  # the loaded module learns
    assert model.transformer.h[0].mlp.c_fc.weight.grad is None  # upstream of the loaded inputs: no gradient


UP262 = Path(__file__).resolve().parents[1] / "data" / "load_up262"


def test_a_26_2_0_tensor_dump_is_loaded(tmp_path):
    """The clean run was dumped by msprobe 26.2.0 (``make_up262_dump.py``: step0/proc{pid}/); the perturbed run
    loads its ``Module.b.Linear.forward.0`` inputs and computes the clean output again, bit for bit."""

    class Net(torch.nn.Module):  # the net of make_up262_dump.py
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    net = Net()
    net.load_state_dict(torch.load(UP262 / "w.pt"))
    with torch.no_grad():
        net.a.weight.mul_(1.1)
    x, expected = torch.load(UP262 / "x.pt"), torch.load(UP262 / "y.pt").double().numpy()
    assert not np.array_equal(net(x).detach().double().numpy(), expected)
    load = {"path": str(UP262 / "dump"), "modules": ["Module.b.Linear.forward.0"]}
    debugger = PrecisionDebugger(config_path=load_config(tmp_path, "up", load))
    debugger.start(net)
    observed = net(x).detach().double().numpy()
    debugger.stop()
    debugger.finish()
    assert np.array_equal(observed, expected)
