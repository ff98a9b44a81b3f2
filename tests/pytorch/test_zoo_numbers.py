"""The debugger must not change the numbers of runs on real architectures (issue 10, point 1).

For each zoo model, two AdamW steps with the debugger off and on — levels L0, L1, mix; tasks statistics
and tensor — must give bit-identical losses, parameters and gradients. This is where in-place modules
(``ReLU(inplace=True)`` in every ResNet) and the order of gradient accumulation (LLaMA's RMSNorm reads
its input twice while the residual add reads it too) are exercised.
"""

from __future__ import annotations

import json

import pytest
import torch
from zoo import ZOO, train

from msprobe.pytorch import PrecisionDebugger

pytestmark = pytest.mark.slow

CASES = [("statistics", "L0"), ("statistics", "L1"), ("statistics", "mix"),
         ("tensor", "L0"), ("tensor", "L1"), ("tensor", "mix")]

_references: dict[str, tuple] = {}


def _reference(spec):
    if spec.name not in _references:
        _references[spec.name] = train(spec)
    return _references[spec.name]


def _same(expected, actual) -> bool:
    if expected is None or actual is None:
        return expected is actual
    return expected.dtype == actual.dtype and torch.equal(expected, actual)


@pytest.mark.parametrize("task,level", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("spec", ZOO, ids=lambda s: s.name)
def test_two_adamw_steps_are_bit_identical(tmp_path, spec, task, level):
    losses, params, grads = _reference(spec)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level=level)
    observed_losses, observed_params, observed_grads = train(spec, debugger)
    assert all(_same(a, b) for a, b in zip(losses, observed_losses)), (losses, observed_losses)
    assert all(_same(a, b) for a, b in zip(grads, observed_grads)), "gradients changed"
    assert all(_same(a, b) for a, b in zip(params, observed_params)), "parameters changed"
    data = json.loads((tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text())["data"]
    assert any(name.endswith("backward") or ".backward." in name for name in data)


def test_inplace_relu_module_backward_is_recorded_and_exact(tmp_path):
    """The minimal case of the issue: ``Sequential(Linear, ReLU(inplace=True))`` at L0."""

    def run(debugger=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True))
        x = torch.randn(3, 4)
        if debugger is not None:
            debugger.start(model)
        out = model(x)
        out.pow(2).sum().backward()
        if debugger is not None:
            debugger.stop()
        return model, out.detach()

    plain_model, plain_out = run()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L0", step=[0])
    model, out = run(debugger)
    assert torch.equal(plain_out, out)
    for a, b in zip(plain_model.parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad)
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    relu = data["Module.1.ReLU.backward.0"]
    # the gradient flowing into the ReLU is 2 * out; the one it gives its input is masked by out > 0
    grad_in = 2 * out.double()
    grad_out = grad_in * (out > 0)
    assert relu["input"][0]["Max"] == pytest.approx(grad_in.max().item(), rel=1e-6)
    assert relu["output"][0]["Norm"] == pytest.approx(grad_out.norm().item(), rel=1e-6)
