"""Interceptor: which calls are recorded, under which names, and that nothing is seen when off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hook_sink import RecordingSink

from msprobe.pytorch.hooks import Interceptor

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-outputs" / "pytorch"
# What docs/interop.md#differences-that-stay-readable-by-111 fixes in 1.1.1: view_as from its hook machinery and
# ones_like from backward() are not user calls.
QUIRKS = ("Tensor.view_as.", "Torch.ones_like.")


class Tiny(nn.Module):
    """The model of reference-outputs/pytorch/generate.py."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        h = F.relu(self.conv(x))
        return self.fc(h.flatten(1))


def _run_reference_step(level: str):
    torch.manual_seed(0)
    model = Tiny()
    torch.manual_seed(1)
    x, y = torch.randn(2, 1, 4, 4), torch.tensor([0, 2])
    sink = RecordingSink()
    interceptor = Interceptor(sink, level=level)
    interceptor.attach(model)
    interceptor.enable()
    loss = F.cross_entropy(model(x).float(), y)
    if torch.isfinite(loss):
        loss.backward()
    interceptor.disable()
    return sink


def _reference_names(case: str) -> list[str]:
    data = json.loads((REFERENCE / case / "step0/rank/dump.json").read_text())["data"]
    return [name for name in data if not name.startswith(QUIRKS)]


@pytest.mark.parametrize("level, case", [("L1", "pt_statistics_L1_fp32"), ("L0", "pt_statistics_L0_fp32")])
def test_names_match_the_1_1_1_reference(level, case):
    sink = _run_reference_step(level)
    assert sink.names == _reference_names(case)


def test_mix_names_match_the_1_1_1_reference():
    sink = _run_reference_step("mix")
    # forward entries in end order (how 1.1.1 lists them), backward in firing order
    assert sink.ended + sink.backward_names == _reference_names("pt_statistics_mix_fp32")


def test_identity_of_wrapped_functions_survives():
    gelu, add, linear = F.gelu, torch.add, F.linear
    interceptor = Interceptor(RecordingSink(), level="L1")
    interceptor.enable()
    assert F.gelu is gelu and torch.add is add and F.linear is linear and F.gelu is F.gelu
    assert isinstance(torch.ones(2), torch.Tensor)
    interceptor.detach()
    assert F.gelu is gelu and torch.add is add


def test_nothing_recorded_while_disabled_or_after_detach():
    add = torch.Tensor.__add__
    sink = RecordingSink()
    model = Tiny()
    interceptor = Interceptor(sink, level="mix")
    interceptor.attach(model)
    model(torch.randn(1, 1, 4, 4)).sum().backward()
    assert sink.names == []
    interceptor.enable()
    torch.ones(1) + 1
    assert sink.forward == ["Torch.ones.0.forward", "Tensor.__add__.0.forward"]
    interceptor.detach()
    model(torch.randn(1, 1, 4, 4)).sum().backward()
    torch.ones(1) + 1
    assert len(sink.forward) == 2 and sink.backward_names == []
    assert torch.Tensor.__add__ is add
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_operators_and_indexing_keep_their_dunder_names():
    sink = RecordingSink()
    interceptor = Interceptor(sink, level="L1")
    x = torch.arange(4.0)
    interceptor.enable()
    y = x + 1
    y = 2 * y
    y += 1
    y[0] = 7.0
    z = y[1:]
    _ = (z > 0).any()
    x.add(1)
    x.dim(), x.size(), x.shape, repr(x)  # metadata queries are not recorded
    interceptor.disable()
    assert sink.forward == [
        "Tensor.__add__.0.forward",
        "Tensor.__rmul__.0.forward",
        "Tensor.__iadd__.0.forward",
        "Tensor.__setitem__.0.forward",
        "Tensor.__getitem__.0.forward",
        "Tensor.__gt__.0.forward",
        "Tensor.any.0.forward",
        "Tensor.add.0.forward",
    ]


def test_calls_nested_in_an_api_and_sink_calls_are_not_recorded():
    sink = RecordingSink()  # its forward_start runs torch.aminmax on every input
    interceptor = Interceptor(sink, level="L1")
    interceptor.enable()
    F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 1, 2]))
    interceptor.disable()
    assert sink.forward == ["Torch.randn.0.forward", "Torch.tensor.0.forward", "Functional.cross_entropy.0.forward"]


def test_autograd_internals_are_not_recorded():
    sink = RecordingSink()
    interceptor = Interceptor(sink, level="L1")
    w = torch.randn(3, requires_grad=True)
    interceptor.enable()
    loss = (w * 2).sum()
    torch.autograd.grad(loss, w, retain_graph=True)
    loss.backward(retain_graph=True)
    torch.autograd.backward(loss)
    interceptor.disable()
    assert sink.forward == ["Tensor.__mul__.0.forward", "Tensor.sum.0.forward"]


def test_shared_module_counts_and_reset():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(self.fc(x))

    sink = RecordingSink()
    model = Twice()
    interceptor = Interceptor(sink, level="L0")
    interceptor.attach(model)
    interceptor.enable()
    model(torch.randn(2, 3)).sum().backward()
    interceptor.reset_counts()
    model(torch.randn(2, 3))
    interceptor.disable()
    assert sink.forward == [
        "Module.fc.Linear.forward.0",
        "Module.fc.Linear.forward.1",
        "Module.fc.Linear.forward.0",
        "Module.fc.Linear.forward.1",
    ]
    assert sink.backward_names == ["Module.fc.Linear.backward.1", "Module.fc.Linear.backward.0"]


def test_gru_records_vf_entries():
    sink = RecordingSink()
    model = nn.GRU(4, 5, batch_first=True)
    interceptor = Interceptor(sink, level="mix")
    interceptor.attach(nn.Sequential(model))
    interceptor.enable()
    out, _ = model(torch.randn(2, 3, 4))
    out.sum().backward()
    interceptor.disable()
    assert "VF.gru.0.forward" in sink.forward
    assert "Module.0.GRU.forward.0" in sink.forward
    assert "VF.gru.0.backward" in sink.backward_names


def test_bad_level_and_model_are_refused():
    with pytest.raises(ValueError, match="level 'L3' is not one of L0, L1, mix"):
        Interceptor(RecordingSink(), level="L3")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        Interceptor(RecordingSink(), level="L0").attach("model")


def test_module_names_that_cannot_be_entry_or_file_names_are_repaired_not_raised():
    model = nn.Sequential(nn.Linear(3, 3))
    model._modules[".."] = nn.ReLU()  # what setattr/_modules allow although add_module refuses it
    model._modules["a/b"] = nn.Tanh()
    model._modules["x\ny"] = nn.Identity()
    sink = RecordingSink()
    interceptor = Interceptor(sink, level="L0")
    interceptor.attach(model)
    interceptor.enable()
    model(torch.randn(2, 3, requires_grad=True)).sum().backward()
    interceptor.disable()
    assert sink.ended == ["Module.0.Linear.forward.0", "Module._._._.ReLU.forward.0", "Module.a_b.Tanh.forward.0",
                          "Module.x_y.Identity.forward.0"]
    assert "Module._._._.ReLU.backward.0" in sink.backward_names


def _installed_state(model: nn.Module) -> tuple:
    """Everything the interceptor may install: Tensor's own dunders, the collectives, the function-mode
    stack and the module hooks."""
    from msprobe.pytorch.hooks.api_names import OPERATOR_DUNDERS
    from msprobe.pytorch.hooks.distributed import COLLECTIVES

    dunders = {name: vars(torch.Tensor).get(name) for name in OPERATOR_DUNDERS}
    collectives = {name: getattr(torch.distributed, name, None) for name in COLLECTIVES}
    hooks = [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]
    return dunders, collectives, torch._C._len_torch_function_stack(), hooks


def test_enable_disable_and_module_dump_windows_restore_everything_exactly():
    model = Tiny()
    before = _installed_state(model)
    sink = RecordingSink()
    interceptor = Interceptor(sink, level="mix")
    interceptor.attach(model)
    for _ in range(2):  # idempotent, and the same again after a full cycle
        interceptor.enable()
        interceptor.enable()
        assert _installed_state(model) != before
        with interceptor.dump_module(model.fc, "head"):  # only the solo hooks while the window is open
            assert torch._C._len_torch_function_stack() == before[2]
            assert [len(m._forward_hooks) for m in model.modules()] == [0, 0, 1]
            model(torch.randn(1, 1, 4, 4))
        assert sink.forward[-1].startswith("Module.head.Linear.forward.")
        assert _installed_state(model) != before  # the window closed: the level's hooks are back
        interceptor.disable()
        interceptor.disable()
        assert _installed_state(model) == before

    # a window opened before enable() and still open at disable(): nothing is left behind either
    interceptor.dump_module(model.fc, "head")
    interceptor.enable()
    interceptor.disable()
    assert _installed_state(model) == before
    interceptor.detach()
    assert _installed_state(model) == before
