"""What TrainerMon collects during one step, and the hooks that feed it.

Data flows one way: a hook hands tensors to the step's collector (:mod:`msprobe.core.monitor.collector`),
which queues their reductions on the device (:class:`~msprobe.pytorch.monitor.stats.StepBuffer`) and
remembers, in execution order, which row is which.

Activations come from forward hooks; activation gradients from pre-hooks on the autograd nodes that made
those same inputs and outputs (a tensor hook for a leaf; not ``register_full_backward_hook``, which rewires
the graph and breaks in-place ops after a hooked module). A forward run again by activation checkpointing
during the backward pass is not measured a second time (its outputs only get gradient hooks: under
reentrant checkpointing they are the ones the gradients flow through).
"""

from __future__ import annotations

import weakref

import torch

from msprobe.core.monitor.collector import StepCollector, labelled
from msprobe.core.monitor.records import ACTV, ACTV_GRAD
from msprobe.pytorch.monitor.stats import measurable

in_backward = torch._C._current_graph_task_id  # -1 outside a backward pass


def tensors_in(value: object) -> list[torch.Tensor]:
    """The measurable tensors of a hook argument: a tensor, or those directly inside a tuple, list or dict."""
    if isinstance(value, torch.Tensor):
        return [value] if measurable(value) else []
    if isinstance(value, (tuple, list)):
        return [item for item in value if measurable(item)]
    if isinstance(value, dict) and value:
        return [item for item in value.values() if measurable(item)]
    return []


class ModuleWatch:
    """Forward hooks on the watched modules: activations and, through tensor hooks, their gradients. A tensor
    that is one module's output and the next one's input gets one gradient hook for both names."""

    def __init__(self, mon, collector_of, forward: bool, backward: bool) -> None:
        self.mon, self.collector_of = mon, collector_of
        self.forward, self.backward = forward, backward
        # this step's gradient hooks: id(tensor) -> (the tensor, (micro-step, vpp, its version), the names its
        # gradient gets); a tensor changed in place since has another gradient (its new node's) and hook
        self.hooked: dict[int, tuple[weakref.ref, tuple[int, int, int], list[str]]] = {}
        self.hooked_for: StepCollector | None = None  # the step self.hooked belongs to

    def hook(self, name: str, vpp: int):
        def forward_hook(module, args, kwargs, output):
            collector = self.collector_of()
            if collector is None or not module.training or name in collector.failed:
                return
            try:
                self._observe(collector, name, vpp, tensors_in(args) + tensors_in(kwargs), tensors_in(output))
            except Exception as error:  # the run goes on without this module's metrics
                collector.guard(name, error)

        return forward_hook

    def _observe(self, collector: StepCollector, name: str, vpp: int, inputs: list, outputs: list) -> None:
        micro = self.mon.micro_step
        named = labelled(name, "input", inputs) + labelled(name, "output", outputs)
        if self.forward and in_backward() == -1:
            collector.add(ACTV, named, micro, vpp)
        if torch.is_grad_enabled():  # forward_only still counts micro-batches by the gradients' arrival
            if self.hooked_for is not collector:
                self.hooked, self.hooked_for = {}, collector
            for label, tensor in named:
                if tensor.requires_grad:
                    self._hook_gradient(tensor, label, micro, vpp)

    def _hook_gradient(self, tensor: torch.Tensor, label: str, micro: int, vpp: int) -> None:
        where = (micro, vpp, tensor._version)
        entry = self.hooked.get(id(tensor))
        if entry is not None and entry[0]() is tensor and entry[1] == where:
            entry[2].append(label)
            return
        names = [label]
        self.hooked[id(tensor)] = (weakref.ref(tensor), where, names)
        node = tensor.grad_fn
        if node is None:  # a leaf: a hook of its own
            tensor.register_hook(self._grad_hook(names, micro, vpp))
        else:  # a pre-hook on the node that made it: the same gradient, at half the cost of Tensor.register_hook
            node.register_prehook(self._grad_hook(names, micro, vpp, tensor.output_nr))

    def _grad_hook(self, names: list[str], micro: int, vpp: int, output_nr: int | None = None):
        """The hook reading the gradient of ``names``' tensor: a tensor hook, or with ``output_nr`` a pre-hook
        of the node that made the tensor (it gets the gradients of all the node's outputs). It returns None:
        the gradient goes on unchanged."""
        def grad_hook(grad):
            if output_nr is not None:
                grad = grad[output_nr]
            collector = self.collector_of()
            if collector is None:
                return
            self.mon.note_backward()
            if not self.backward or not measurable(grad):
                return
            try:
                collector.add(ACTV_GRAD, [(name, grad) for name in names], micro, vpp)
            except Exception as error:
                collector.guard(names[0], error)

        return grad_hook
