"""``TrainerMon`` for MindSpore (PyNative): upstream's API on MindSpore's training loop.

A MindSpore optimizer is a ``Cell`` called with the gradient tuple (``optimizer(grads)``), aligned with
``optimizer.parameters``: a forward pre-hook on it reads the gradients the update is about to use
(``grad_reduced``; in a data-parallel job ``grad_unreduced`` comes from each parameter's own hook, the gradient
this rank computed, and is otherwise the same numbers) and the parameters before the update; a forward hook, run
when the update returned, reads Adam's moments (``moment1``/``moment2``, written as upstream's
``exp_avg``/``exp_avg_sq``) and the updated parameters, and ends the step: one host transfer, then the writers
and alerts shared with PyTorch. Activations come from forward hooks on the watched cells; activation gradients
from pre-hooks those forward hooks put on the gradient nodes of the cells' outputs (not a cell backward hook,
which wraps the cell in an identity node and changes what a dump and the user's graph see), each row carrying
the micro-batch it belongs to. With ``cc_distribution`` the communication functions are wrapped while monitoring
is on (:mod:`.collectives`). Cell hooks run in PyNative mode only.
"""

from __future__ import annotations

import logging

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.monitor.collectives import CollectiveWatch
from msprobe.core.monitor.collector import LayoutMemo, StepCollector, labelled
from msprobe.core.monitor.config import check_set_monitor_arguments
from msprobe.core.monitor.records import (
    ACTV,
    ACTV_GRAD,
    EXP_AVG,
    EXP_AVG_SQ,
    GRAD_REDUCED,
    GRAD_UNREDUCED,
    PARAM_ORIGIN,
    PARAM_UPDATED,
)
from msprobe.core.monitor.run import MonitorRun
from msprobe.mindspore.monitor.collectives import MindSporeCollectives
from msprobe.mindspore.monitor.stats import StepBuffer, measurable, tensors_in
from msprobe.mindspore.rank import current_rank, rank_count

logger = logging.getLogger("msprobe")
MOMENTS = ((EXP_AVG, "moment1"), (EXP_AVG_SQ, "moment2"))


def _check_built_here(run: MonitorRun) -> None:
    """The keys only the PyTorch monitor implements, reported before training rather than ignored."""
    if run.config.moe_distribution:
        allowed = "false on MindSpore (built for PyTorch only, docs/monitor.md#mindspore)"
        raise ConfigError([Problem("moe_distribution", True, allowed)], file=run.path)


class TrainerMon:
    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None) -> None:
        self.rank = current_rank() or 0
        self.run = MonitorRun(config_file_path, self.rank)
        _check_built_here(self.run)
        self.process_group, self.opt_ty = process_group, opt_ty
        self.step = 0
        self.collector: StepCollector | None = None
        self.handles: list = []
        self.hooked = False  # hooks on (weight gradients alone put none on a single process's model)
        self.reduced_apart = False  # data parallel: the optimizer's gradients are not the ones this rank computed
        self.collectives: CollectiveWatch | None = None
        self.failed: set[str] = set()  # metric sources left out after an error, for the whole run
        self.layouts = LayoutMemo()  # the last step's rows, for the next step's collector
        self.optimizer = None
        self.cells: list = []
        self.forwards = 0  # calls of the model since the last optimizer call: the micro-batches begun
        self.grad_acc_steps = 1

    def set_monitor(self, model, optimizer, grad_acc_steps=1, tp_group=None, dp_group=None, start_iteration=0):
        """Micro-batches are counted by the calls of ``model`` between two optimizer calls (PyNative runs a
        micro-batch's backward right after its forward)."""
        check_set_monitor_arguments(grad_acc_steps, start_iteration)
        self.step, self.grad_acc_steps = start_iteration, grad_acc_steps
        self.reduced_apart = dp_group is not None or rank_count() > 1
        model.register_forward_pre_hook(self._count_forward)
        self.optimizer = optimizer
        targets = set(self.run.config.targets)
        self.cells = [(name, cell) for name, cell in model.cells_and_names() if not targets or name in targets]
        optimizer.register_forward_pre_hook(lambda cell, inputs: self._before_update(inputs[0]))
        optimizer.register_forward_hook(lambda cell, inputs, outputs: self._after_update())
        self._switch()

    @property
    def monitoring(self) -> bool:
        return self.hooked

    @property
    def micro_step(self) -> int:
        """The micro-batch being run, 0-based, as upstream counts it (modulo ``grad_acc_steps``)."""
        return max(self.forwards - 1, 0) % self.grad_acc_steps

    def _count_forward(self, cell, inputs) -> None:
        self.forwards += 1

    def _switch(self) -> None:
        config = self.run.config
        if self.run.done():
            self._remove_hooks()
        elif not self.hooked:
            self._install_hooks()
        self.collector = None
        if self.run.collects(self.step):
            buffer = StepBuffer(self.run.reductions, config.eps)
            self.collector = StepCollector(config.ops, self.run.reductions, buffer, self.failed, self.layouts)

    def _install_hooks(self) -> None:
        config = self.run.config
        if config.xy_distribution:
            self.handles += [cell.register_forward_hook(self._forward_hook(name)) for name, cell in self.cells]
        if config.cc_distribution.enable:
            self.collectives = CollectiveWatch(lambda: self.collector, config.cc_distribution, MindSporeCollectives())
            self.handles.append(self.collectives.install())
        if config.wg_distribution and self.reduced_apart:
            self.handles += [
                param.register_hook(self._gradient_hook(GRAD_UNREDUCED, param.name, None, GRAD_UNREDUCED, True))
                for param in self.optimizer.parameters if param.requires_grad]
        self.hooked = True

    def _remove_hooks(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles, self.hooked = [], False

    def _forward_hook(self, name: str):
        config = self.run.config
        forward, backward = not config.backward_only, not config.forward_only

        def hook(cell, inputs, outputs):
            collector = self.collector
            if collector is None or not cell.training or name in collector.failed:
                return
            try:
                micro, outs = self.micro_step, labelled(name, "output", tensors_in(outputs))
                named = labelled(name, "input", tensors_in(inputs)) + outs
                if forward and named:
                    collector.add(ACTV, named, micro)
                for label, tensor in outs if backward else ():
                    self._hook_output(tensor, label, micro)
            except Exception as error:
                collector.guard(name, error)

        return hook

    def _hook_output(self, tensor, label: str, micro: int) -> None:
        """The gradient reaching a cell's output, taken by a pre-hook on the gradient node that made it, as the
        dump's backward capture takes it (a tensor hook goes through PyNative's gradient pipeline, many times
        dearer: docs/performance.md#round-8-2026-12-06-metadata-read-once-output-hooks-on-nodes); a tensor
        hook where no such node is."""
        node = tensor._grad_node
        if node is None or node.is_leaf():
            tensor.register_hook(self._gradient_hook(ACTV_GRAD, label, micro, label))
        else:
            node.register_prehook(self._gradient_hook(ACTV_GRAD, label, micro, label, slot=tensor._output_index))

    def _gradient_hook(self, group: str, name: str, micro: int | None, source: str, last_micro_only: bool = False,
                       slot: int | None = None):
        """A hook reading the gradient reaching a cell's output (``actv_grad``) or, in a data-parallel job, a
        parameter (``grad_unreduced``: the gradient autograd computed on this rank, before the reduce, in the
        step's last micro-batch; with accumulation the last micro-batch's, the sum being the training
        code's): a tensor hook, or with ``slot`` a node pre-hook (it gets the gradients of all the node's
        outputs). It leaves the gradient unchanged (it returns None); ``source`` is what an error leaves out."""
        def hook(grad):
            if slot is not None:
                grad = grad[slot] if slot < len(grad) else None
            collector = self.collector
            if (collector is None or source in collector.failed or not measurable(grad)
                    or (last_micro_only and self.micro_step < self.grad_acc_steps - 1)):
                return
            try:
                collector.add(group, [(name, grad)], micro)
            except Exception as error:
                collector.guard(source, error)

        return hook

    def _parameters(self, group: str, values) -> None:
        names = [p.name for p in self.optimizer.parameters]
        named = [(n, v) for n, v in zip(names, values) if measurable(v)]
        if named and group not in self.collector.failed:
            try:
                self.collector.add(group, named, None)
            except Exception as error:
                self.collector.guard(group, error)

    def _before_update(self, grads) -> None:
        if self.collector is None:
            return
        config = self.run.config
        if config.wg_distribution:
            self._parameters(GRAD_REDUCED, grads)
            if not self.reduced_apart:
                self.collector.alias(GRAD_UNREDUCED, GRAD_REDUCED)
        if config.param_distribution:
            self._parameters(PARAM_ORIGIN, list(self.optimizer.parameters))  # reduced before the update runs

    def _after_update(self) -> None:
        try:
            if self.collector is not None:
                config = self.run.config
                if config.mv_distribution:
                    for group, attribute in MOMENTS:
                        moments = getattr(self.optimizer, attribute, None)
                        if moments is not None:
                            self._parameters(group, list(moments))
                if config.param_distribution:
                    self._parameters(PARAM_UPDATED, list(self.optimizer.parameters))
                self.run.write(self.collector.metrics(self.step, self.rank))
                if self.collectives is not None and config.cc_distribution.log_only:
                    self.collectives.write_stacks(self.run.directory)
        except Exception as error:
            logger.warning("monitor: step %d not written: %s: %s", self.step, type(error).__name__, error)
        self.step, self.forwards = self.step + 1, 0
        if self.run.reload_if_changed():
            self._remove_hooks()  # the hooks hold the previous configuration's choices
        self._switch()
