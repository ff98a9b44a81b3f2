"""A real CallSink for the hook tests: records what the interceptor reports, in order."""

from __future__ import annotations

from typing import Any

import torch

from msprobe.core.contract import Call
from msprobe.core.lifecycle.naming import backward_name


class RecordingSink:
    """Keeps forward names (start and end order), inputs as they were, outputs, and backward grads.

    ``forward_start`` runs torch code on purpose (a reduction), so the tests can check that calls made
    by a sink are never recorded themselves.
    """

    def __init__(self, want_backward: bool = True) -> None:
        self.want_backward = want_backward
        self.forward: list[str] = []
        self.ended: list[str] = []
        self.inputs: dict[str, list] = {}
        self.outputs: dict[str, Any] = {}
        self.backward_names: list[str] = []
        self.grads: dict[str, tuple[tuple, tuple]] = {}

    def forward_start(self, call: Call) -> bool:
        self.forward.append(call.name)
        self.inputs[call.name] = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in call.args]
        for a in call.args:
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
                torch.aminmax(a.detach())
        return self.want_backward

    def forward_end(self, call: Call, output: Any) -> None:
        self.ended.append(call.name)
        self.outputs[call.name] = output

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        self.backward_names.append(name)
        self.grads[name] = (grad_input, grad_output)

    @property
    def names(self) -> list[str]:
        return self.forward + self.backward_names
