"""Backward capture: gradients checked against autograd, user code unchanged, numbers unchanged."""

from __future__ import annotations

import copy
import gc
import pickle

import torch
import torch.nn as nn
import torch.nn.functional as F
from hook_sink import RecordingSink

from msprobe.pytorch.hooks import Interceptor


def _enabled(sink, level="L1", model=None) -> Interceptor:
    interceptor = Interceptor(sink, level=level)
    interceptor.attach(model)
    interceptor.enable()
    return interceptor


def test_api_backward_grads_equal_autograd():
    torch.manual_seed(0)
    x = torch.randn(4, 5, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    b = torch.randn(3)  # needs no gradient → None in the backward output
    sink = RecordingSink()
    interceptor = _enabled(sink)
    h = F.linear(x, w, b)
    loss = (h * h).sum()
    loss.backward()
    interceptor.disable()

    gh = 2 * h.detach()
    want_x, want_w = torch.autograd.grad(F.linear(x, w, b), (x, w), gh)
    grad_in, grad_out = sink.grads["Functional.linear.0.backward"]
    assert torch.equal(grad_in[0], gh)
    assert torch.equal(grad_out[0], want_x) and torch.equal(grad_out[1], want_w) and grad_out[2] is None
    # the same tensor passed twice is wrapped once (so `a is b` checks in user code still hold):
    # each position reports the whole gradient the call produced for that tensor, 2 * h * gh
    grad_in, grad_out = sink.grads["Tensor.__mul__.0.backward"]
    assert torch.equal(grad_out[0], 2 * h.detach()) and torch.equal(grad_out[1], 2 * h.detach())


def test_module_backward_grads_equal_autograd():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh())
    x = torch.randn(2, 5, requires_grad=True)
    sink = RecordingSink()
    interceptor = _enabled(sink, "L0", model)
    out = model(x)
    out.pow(2).sum().backward()
    interceptor.disable()
    hidden = model[0](x)
    (want,) = torch.autograd.grad(model[1](hidden), hidden, 2 * out.detach())
    grad_in, grad_out = sink.grads["Module.1.Tanh.backward.0"]
    assert torch.equal(grad_in[0], 2 * out.detach()) and torch.equal(grad_out[0], want)
    assert torch.equal(sink.grads["Module.0.Linear.backward.0"][1][0], torch.autograd.grad(hidden, x, want)[0])


def test_inplace_on_outputs_and_views_still_works():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)

    def run():
        h = F.linear(x, w)
        h.relu_()
        a = h * 2
        y = a.view(-1)
        y.add_(1)
        y.mul_(3)
        z = a.contiguous()
        z.mul_(2)
        return (a * a).sum()

    loss = run()
    plain = torch.autograd.grad(loss, (x, w))
    sink = RecordingSink()
    interceptor = _enabled(sink)
    loss_hooked = run()
    hooked = torch.autograd.grad(loss_hooked, (x, w))
    interceptor.disable()
    assert torch.equal(loss, loss_hooked)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked))
    assert "Tensor.relu_.0.forward" in sink.forward and "Functional.linear.0.backward" in sink.backward_names


def test_inplace_apis_mutate_the_users_tensor_and_see_inputs_before():
    sink = RecordingSink()
    x = torch.zeros(3)
    out = torch.empty(3)
    interceptor = _enabled(sink)
    same = x.add_(1)
    x[0] = 5.0
    torch.add(x, 1, out=out)
    interceptor.disable()
    assert same is x and x.tolist() == [5.0, 1.0, 1.0] and out.tolist() == [6.0, 2.0, 2.0]
    assert sink.inputs["Tensor.add_.0.forward"][0].tolist() == [0.0, 0.0, 0.0]
    assert sink.inputs["Tensor.__setitem__.0.forward"][0].tolist() == [1.0, 1.0, 1.0]


def test_ops_returning_their_input_return_it_unchanged():
    x = torch.randn(3, requires_grad=True)
    h = x * 1
    sink = RecordingSink()
    interceptor = _enabled(sink)
    assert h.contiguous() is h and h.to(h.dtype) is h
    assert x.contiguous() is x
    interceptor.disable()


def test_three_sgd_steps_are_bit_identical():
    def train(with_interceptor: bool, level: str):
        torch.manual_seed(0)
        model = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.randn(3, 4, 5, 16)
        interceptor = Interceptor(RecordingSink(), level=level) if with_interceptor else None
        losses = []
        for step in range(3):
            if interceptor:
                interceptor.attach(model)
                interceptor.enable()
            loss = model(data[step]).pow(2).mean()
            loss.backward()
            if interceptor:
                interceptor.disable()
                interceptor.reset_counts()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        return losses, [p.detach().clone() for p in model.parameters()]

    plain_losses, plain_params = train(False, "mix")
    for level in ("L1", "mix"):
        losses, params = train(True, level)
        assert all(torch.equal(a, b) for a, b in zip(plain_losses, losses))
        assert all(torch.equal(a, b) for a, b in zip(plain_params, params))


def test_compile_and_pickle_still_work():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    interceptor = _enabled(RecordingSink(), "mix", model)
    model(torch.randn(2, 3))
    restored = pickle.loads(pickle.dumps(model))
    assert isinstance(copy.deepcopy(model), nn.Sequential)
    assert torch.equal(restored[0].weight, model[0].weight)
    restored(torch.randn(2, 3))  # the copy's hooks are inert
    interceptor.disable()

    compiled = torch.compile(lambda t: torch.sin(t) * 2, backend="eager")
    t = torch.randn(4)
    interceptor.enable()
    assert torch.equal(compiled(t), torch.sin(t) * 2)
    interceptor.detach()


def test_backward_after_disable_is_not_reported():
    sink = RecordingSink()
    x = torch.randn(3, requires_grad=True)
    interceptor = _enabled(sink)
    y = x.exp()
    interceptor.disable()
    y.sum().backward()
    assert sink.backward_names == []


class _ReadsTwice(nn.Module):
    """RMSNorm's shape: the input is read by two ops inside the module."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_gradient_accumulation_order_is_unchanged_at_every_level():
    """A module reading its input twice while the input also feeds a residual add: an identity node
    around the module would sum its two contributions first, (a + b) + c becoming a + (b + c)."""

    def run(level):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 64), _ReadsTwice(), nn.Linear(64, 64))
        x = torch.randn(16, 64)
        interceptor = _enabled(RecordingSink(), level, model) if level else None
        h = model[0](x)
        out = model[2](model[1](h)) + h * 3.7
        out.pow(2).sum().backward()
        if interceptor:
            interceptor.disable()
        return [p.grad for p in model.parameters()]

    plain = run(None)
    for level in ("L0", "L1", "mix"):
        assert all(torch.equal(a, b) for a, b in zip(plain, run(level))), level


def test_inplace_module_and_inplace_api_report_the_gradient_of_the_value_before():
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    model = nn.Sequential(nn.ReLU(inplace=True))
    sink = RecordingSink()
    interceptor = _enabled(sink, "mix", model)
    h = x * 1.5
    out = model(h)
    y = out * 2.0
    y.add_(x)
    (y * y).sum().backward()
    interceptor.disable()
    assert out is h
    g = 2 * y.detach()
    relu_in = (x * 1.5).detach()
    assert torch.equal(x.grad, (g * 2.0) * (relu_in > 0) * 1.5 + g)
    grad_in, grad_out = sink.grads["Module.0.ReLU.backward.0"]
    assert torch.equal(grad_in[0], g * 2.0) and torch.equal(grad_out[0], (g * 2.0) * (relu_in > 0))
    grad_in, grad_out = sink.grads["Tensor.add_.0.backward"]
    assert torch.equal(grad_in[0], g) and torch.equal(grad_out[0], g) and torch.equal(grad_out[1], g)


def test_unused_branch_is_reported_at_the_end_of_the_pass_and_each_pass_reports_again():
    x = torch.randn(4, requires_grad=True)
    sink = RecordingSink()
    interceptor = _enabled(sink)
    a, b = x.exp(), x.sin()
    both = torch.stack([a, b])  # consumes both, but only the first row reaches the loss
    loss = both[0].sum()
    loss.backward(retain_graph=True)
    loss.backward()
    interceptor.disable()
    assert sink.backward_names.count("Torch.stack.0.backward") == 2
    assert sink.backward_names.count("Tensor.exp.0.backward") == 2
    grad_in, grad_out = sink.grads["Torch.stack.0.backward"]
    assert torch.equal(grad_out[0], torch.ones(4)) and torch.equal(grad_out[1], torch.zeros(4))


def test_a_users_function_mode_sees_only_the_users_calls():
    """msprobe's own torch calls (statistics, backward capture) are hidden from a user's mode that is
    on the stack below ours."""
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    def run(with_msprobe: bool) -> list[str]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
        x = torch.randn(3, 4)
        with Seen() as seen:
            interceptor = _enabled(RecordingSink(), "mix", model) if with_msprobe else None
            model(x).pow(2).sum().backward()
            if interceptor:
                interceptor.disable()
        return seen.calls

    assert run(True) == run(False)


def test_leaf_passed_twice_and_used_elsewhere():
    """A leaf's edge is matched by its accumulator's ``variable``: both positions get the whole gradient
    of this call, and another call's use of the same leaf is not counted in."""
    w = torch.randn(3, requires_grad=True)
    sink = RecordingSink()
    interceptor = _enabled(sink)
    y = torch.mul(w, w)
    z = torch.add(y, w)  # w again, in another call
    z.sum().backward()
    interceptor.disable()
    grad_in, grad_out = sink.grads["Torch.mul.0.backward"]
    assert torch.equal(grad_out[0], 2 * w.detach()) and torch.equal(grad_out[1], 2 * w.detach())
    assert torch.equal(sink.grads["Torch.add.0.backward"][1][1], torch.ones(3))


def test_users_hooks_on_a_captured_output_run_and_come_off_as_without_msprobe():
    """The capture's hook on an output sits in the tensor's own hook table, before the user's: it reports
    the gradient before a user's hook changes it, and a user's handle removes the user's hook only."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(2, 4, requires_grad=True)
    sink = RecordingSink()
    interceptor = _enabled(sink)
    h = F.linear(x, w)
    h.register_hook(lambda g: g * 100).remove()
    h.register_hook(lambda g: g * 2)
    h.backward(torch.ones(3, 2))
    interceptor.disable()
    grad_in, grad_out = sink.grads["Functional.linear.0.backward"]
    assert torch.equal(grad_in[0], torch.ones(3, 2))
    assert torch.equal(grad_out[0], torch.full((3, 2), 2.0) @ w.detach()) and torch.equal(x.grad, grad_out[0])


class _KeepsNothing:
    def forward_start(self, call):
        return True

    def forward_end(self, call, output):
        return None

    def backward(self, call, grad_input, grad_output):
        pass


def test_a_capture_keeps_few_objects_until_the_backward():
    """What a capture keeps lives from the forward to the backward, ages into the collector's old
    generations and brings the next walk of the whole heap closer: one capture, one object per hook and
    PyTorch's hook tables per call (~10 with the call itself), where closures, lists and handles made ~28."""

    def kept_per_call(with_msprobe: bool, n: int = 50) -> float:
        torch.manual_seed(0)
        weights = [torch.randn(4, 4, requires_grad=True) for _ in range(n)]
        x = torch.randn(2, 4)
        interceptor = _enabled(_KeepsNothing()) if with_msprobe else None
        gc.collect()
        before = len(gc.get_objects())
        for w in weights:
            x = torch.tanh(F.linear(x, w))
        if interceptor:
            interceptor.disable()
        gc.collect()
        kept = len(gc.get_objects()) - before
        x.sum().backward()
        return kept / (2 * n)

    assert kept_per_call(True) - kept_per_call(False) < 14
