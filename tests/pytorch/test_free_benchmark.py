"""task free_benchmark on PyTorch (docs/free_benchmark.md#pytorch): unstable APIs are flagged, stable ones are not,
every pert_mode runs, fix replaces the output as documented, and check mode leaves the run's numbers alone."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch_models import TinyTransformer, train

from msprobe.core.free_benchmark import CSV_FILE, read_rows
from msprobe.pytorch import PrecisionDebugger

MODES = ("improve_precision", "add_noise", "bit_noise", "no_change", "change_value", "to_cpu")


class HalfNet(nn.Module):
    """fp16 activations: ``exp`` overflows in fp16 (max 65504) where fp32 does not; ``relu`` is exact."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x).half()
        return torch.exp(h * 4).float().sum() + torch.relu(h).float().sum()


def _debugger(tmp_path, **section):
    section.setdefault("pert_mode", "improve_precision")
    if section["pert_mode"] == "to_cpu":
        section["fuzz_device"] = "cpu"
    config = {"task": "free_benchmark", "dump_path": str(tmp_path / "out"), "free_benchmark": section}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return PrecisionDebugger(config_path=str(tmp_path / "config.json"))


def _run_half_net(debugger, steps: int = 1):
    torch.manual_seed(0)
    model = HalfNet()
    x = torch.randn(8, 4) * 2
    for _ in range(steps):
        debugger.start(model)
        model(x).backward()
        debugger.stop()
        debugger.step()


def _rows(tmp_path):
    return read_rows(tmp_path / "out" / CSV_FILE)


def test_fp16_exp_overflow_is_flagged_and_relu_is_not(tmp_path):
    _run_half_net(_debugger(tmp_path))
    rows = _rows(tmp_path)
    assert [r["api_name"] for r in rows] == ["Torch.exp.0"]
    row = rows[0]
    assert row == {"rank": "", "pert_mode": "improve_precision", "stage": "forward", "step": "0",
                   "api_name": "Torch.exp.0", "max_rel": "inf", "dtype": "torch.float16", "shape": "(8, 4)",
                   "output_index": ""}


@pytest.mark.parametrize("mode", MODES)
def test_every_pert_mode_runs_and_relu_stays_quiet(tmp_path, mode, msprobe_log):
    _run_half_net(_debugger(tmp_path, pert_mode=mode))
    names = [r["api_name"] for r in _rows(tmp_path)]
    assert "Torch.relu.0" not in names
    assert all(r["pert_mode"] == mode for r in _rows(tmp_path))
    if mode == "change_value":  # swapping elements is a large change for every API that is not symmetric
        assert {"Functional.linear.0", "Torch.exp.0"} <= set(names)
    if mode in ("no_change", "to_cpu"):  # deterministic CPU kernels: identical results
        assert names == []


def test_backward_stage_flags_exp_gradient(tmp_path):
    _run_half_net(_debugger(tmp_path, fuzz_stage="backward"))
    rows = _rows(tmp_path)
    assert [(r["api_name"], r["stage"], r["max_rel"]) for r in rows] == [("Torch.exp.0", "backward", "inf")]


def test_rows_append_across_steps(tmp_path):
    _run_half_net(_debugger(tmp_path), steps=3)
    assert [(r["step"], r["api_name"]) for r in _rows(tmp_path)] == [(str(s), "Torch.exp.0") for s in range(3)]


def test_fix_gives_the_fp32_result_cast_back(tmp_path):
    torch.manual_seed(0)
    x = torch.rand(4096).half()
    plain = torch.cumsum(x, 0)
    expected = torch.cumsum(x.float(), 0).half()  # independent reference: fp32 kernel, cast back
    assert not torch.equal(plain, expected)  # fp16 accumulation really differs
    debugger = _debugger(tmp_path, handler_type="fix")
    debugger.start()
    fixed = torch.cumsum(x, 0)
    debugger.stop()
    assert fixed.dtype == torch.float16 and torch.equal(fixed, expected)
    assert _rows(tmp_path) == []  # fix writes no rows


def test_fix_keeps_gradients_flowing(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(64, dtype=torch.float16, requires_grad=True)
    debugger = _debugger(tmp_path, handler_type="fix")
    debugger.start()
    torch.cumsum(w * 2, 0).float().sum().backward()
    debugger.stop()
    expected = (2 * torch.arange(64, 0, -1)).to(torch.float16)
    assert torch.equal(w.grad, expected)


@pytest.mark.parametrize("mode", ["improve_precision", "add_noise", "bit_noise", "change_value"])
def test_check_mode_leaves_losses_and_gradients_bit_identical(tmp_path, mode):
    """TinyTransformer has dropout: the re-runs must not consume the user's random numbers."""
    reference = train(TinyTransformer, steps=2)
    checked = train(TinyTransformer, _debugger(tmp_path, pert_mode=mode), steps=2)
    for expected, got in zip(reference, checked):
        assert all(torch.equal(a, b) for a, b in zip(expected, got))


def test_preheat_calibrates_after_its_steps(tmp_path):
    """With preheat, exp's inf never calibrates (non-finite results stay reportable) every step."""
    _run_half_net(_debugger(tmp_path, if_preheat=True, preheat_step=1, max_sample=1), steps=2)
    assert [(r["step"], r["api_name"]) for r in _rows(tmp_path)] == [("0", "Torch.exp.0"), ("1", "Torch.exp.0")]


def test_scope_is_a_list_of_full_api_names(tmp_path):
    """The seed defines free benchmark's scope as the APIs to check (any number of full names)."""
    _run_half_net(_debugger(tmp_path, pert_mode="add_noise", scope=["Torch.relu.0.forward"]))
    assert _rows(tmp_path) == []  # relu is stable, and exp is outside the scope
    (tmp_path / "b").mkdir()
    _run_half_net(
        _debugger(tmp_path / "b", pert_mode="add_noise",
                  scope=["Torch.relu.0.forward", "Torch.exp.0.forward", "Tensor.half.0.forward"])
    )
    assert [row["api_name"] for row in _rows(tmp_path / "b")] == ["Torch.exp.0"]
