"""``TrainerMon`` for PyTorch: upstream's API, a monitor a user can leave on for a whole run.

    mon = TrainerMon("monitor_config.json")
    mon.set_monitor(model, optimizer, grad_acc_steps=4)
    # train as usual: a step ends when optimizer.step() returns

Steps are counted by the optimizer's step hooks; micro-batches by the backward passes between them.
Weight gradients are read before the data-parallel reduce (``grad_unreduced``: each parameter's
post-accumulate hook on the last micro-batch, when a DDP model or ``dp_group`` reduces them) and after it
(``grad_reduced``: at ``optimizer.step()``); without a reduce the two are the same values, computed once.
Under FSDP2 only the reduced gradient exists outside its hooks: ``grad_reduced`` holds each rank's shard.
With ``moe_distribution`` the fused experts modules get a hook of their own (:mod:`.moe`); with
``cc_distribution`` torch.distributed's collectives are wrapped while monitoring is on (:mod:`.collectives`).
Nothing here changes a tensor of the run: hooks read and return ``None``.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.monitor.alerts import Alert
from msprobe.core.monitor.collectives import CollectiveWatch
from msprobe.core.monitor.collector import LayoutMemo, StepCollector
from msprobe.core.monitor.config import check_set_monitor_arguments
from msprobe.core.monitor.records import (
    EXP_AVG,
    EXP_AVG_SQ,
    GRAD_REDUCED,
    GRAD_UNREDUCED,
    PARAM_ORIGIN,
    PARAM_UPDATED,
)
from msprobe.core.monitor.run import MonitorRun
from msprobe.pytorch.monitor.collect import ModuleWatch
from msprobe.pytorch.monitor.collectives import TorchCollectives
from msprobe.pytorch.monitor.moe import ExpertWatch, is_fused_experts, is_router
from msprobe.pytorch.monitor.stats import StepBuffer, measurable
from msprobe.pytorch.rank import current_rank

logger = logging.getLogger("msprobe")
MOMENTS = ((EXP_AVG, "exp_avg"), (EXP_AVG_SQ, "exp_avg_sq"))


def _local(tensor):
    """A DTensor's shard on this rank (FSDP2, tensor parallelism): metrics are per rank, as the tensors are."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _fully_sharded(module: nn.Module) -> bool:
    """FSDP2 (``fully_shard``) reduce-scatters inside its own hooks: only each rank's reduced shard is seen."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch built without distributed support
        return False
    return isinstance(module, FSDPModule)


def _torch_optimizer(optimizer):
    """The torch optimizer inside a trainer's wrapper (Accelerate's, Lightning's): the one whose ``step`` runs
    the step hooks."""
    def inner(wrapper):
        return getattr(wrapper, "optimizer", None) or getattr(wrapper, "_optimizer", None)

    while isinstance(inner(optimizer), torch.optim.Optimizer):
        optimizer = inner(optimizer)
    return optimizer


class TrainerMon:
    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None) -> None:
        self.rank = current_rank() or 0
        self.run = MonitorRun(config_file_path, self.rank)
        self.process_group = process_group
        self.params_have_main_grad = params_have_main_grad
        self.opt_ty = opt_ty  # upstream names its optimizer wrappers; moments are read from torch's optimizer state
        self.step = 0
        self.backwards = 0  # backward passes completed in this step: the micro-batches done
        self.backward_end_queued = False
        self.grad_acc_steps = 1
        self.collector: StepCollector | None = None
        self.handles: list = []
        self.hooked = False  # hooks on (a config of weight gradients alone puts none on the model)
        self.failed: set[str] = set()  # metric sources left out after an error, for the whole run
        self.layouts = LayoutMemo()  # the last step's rows, for the next step's collector
        self.params: list = []  # (vpp, name, parameter) watched, listed when the hooks go on
        self.expert_params: list = []  # (vpp, name, parameter) of fused experts' 3-D weights (moe_distribution)
        self.models: list[nn.Module] = []
        self.optimizer = None
        self.alert_dump = None  # the PrecisionDebugger an alert armed for the step after it
        self.collectives: CollectiveWatch | None = None

    # -- public API (upstream's) -------------------------------------------------------------------
    def set_monitor(self, model, optimizer, grad_acc_steps=1, tp_group=None, dp_group=None, start_iteration=0):
        check_set_monitor_arguments(grad_acc_steps, start_iteration)
        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        self.models = [chunk.module if isinstance(chunk, nn.parallel.DistributedDataParallel) else chunk
                       for chunk in chunks]
        self.sharded = any(_fully_sharded(chunk) for chunk in chunks)
        self.reduced_apart = not self.sharded and (dp_group is not None or any(
            isinstance(chunk, nn.parallel.DistributedDataParallel) for chunk in chunks))
        self.grad_acc_steps = grad_acc_steps
        self.step = start_iteration
        self.optimizer = _torch_optimizer(optimizer)
        self._check_targets()
        self.optimizer.register_step_pre_hook(lambda *_: self._before_optimizer_step())
        self.optimizer.register_step_post_hook(lambda *_: self._after_optimizer_step())
        self._switch()

    @property
    def micro_step(self) -> int:
        """The micro-batch being run, 0-based, as upstream counts it (modulo ``grad_acc_steps``)."""
        return self.backwards % self.grad_acc_steps

    @property
    def monitoring(self) -> bool:
        return self.hooked

    # -- hooks on and off ---------------------------------------------------------------------------
    def _check_targets(self) -> None:
        targets = self.run.config.targets
        names = {name for chunk in self.models for name, _ in chunk.named_modules()}
        missing = [target for target in targets if target not in names]
        if missing:
            raise ConfigError(
                [Problem(f"targets[{target!r}]", target, "a module name of the model (model.named_modules())")
                 for target in missing], file=self.run.path)

    def _watched(self):
        targets = set(self.run.config.targets)
        for vpp, chunk in enumerate(self.models):
            for name, module in chunk.named_modules():
                if not targets or name in targets:
                    yield vpp, name, module

    def _moe_modules(self, kind):
        """(vpp, name, module) of the modules in the watched modules that ``kind`` accepts (fused experts,
        routers), each once."""
        seen = set()
        for vpp, prefix, module in self._watched():
            for name, sub in module.named_modules(prefix=prefix):
                if id(sub) not in seen and kind(sub):
                    seen.add(id(sub))
                    yield vpp, name, sub

    def _switch(self) -> None:
        """Hooks on while monitoring can still collect a step, every hook off once it cannot."""
        if self.run.done():
            self._remove_hooks()
        elif not self.hooked:
            self._install_hooks()
        self.collector = self._new_collector() if self.run.collects(self.step) else None

    def _new_collector(self) -> StepCollector:
        config = self.run.config
        buffer = StepBuffer(self.run.reductions, config.eps)
        return StepCollector(config.ops, self.run.reductions, buffer, self.failed, self.layouts)

    def _install_hooks(self) -> None:
        config = self.run.config
        self.params = list(self._parameters())
        self.expert_params = []
        if config.xy_distribution:
            watch = ModuleWatch(self, lambda: self.collector, not config.backward_only, not config.forward_only)
            for vpp, name, module in self._watched():
                self.handles.append(module.register_forward_hook(watch.hook(name, vpp), with_kwargs=True))
        if config.moe_distribution:
            watch = ExpertWatch(self, lambda: self.collector)
            for vpp, name, module in self._moe_modules(is_fused_experts):
                self.handles.append(module.register_forward_hook(
                    watch.hook(name, module.num_experts, vpp), with_kwargs=True))
                self.expert_params.extend((vpp, f"{name}.{key}", p) for key, p in module.named_parameters(recurse=False)
                                          if p.requires_grad and p.dim() == 3 and p.shape[0] == module.num_experts)
            for vpp, name, module in self._moe_modules(is_router):
                self.handles.append(module.register_forward_hook(
                    watch.router_hook(name, module.num_experts, vpp), with_kwargs=True))
        if config.cc_distribution.enable:
            self.collectives = CollectiveWatch(lambda: self.collector, config.cc_distribution, TorchCollectives())
            self.handles.append(self.collectives.install())
        if config.wg_distribution and self.reduced_apart:
            for vpp, name, param in self.params:
                self.handles.append(param.register_post_accumulate_grad_hook(self._unreduced_hook(name, vpp)))
        self.hooked = True

    def _remove_hooks(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles, self.hooked = [], False

    def note_backward(self) -> None:
        """Called by every gradient hook: the backward pass's end (a callback of autograd's engine) ends a
        micro-batch. Counting backward passes, not forward calls of one module, holds whatever module the
        training step calls (Lightning calls the LightningModule's children) and ignores checkpointed
        forwards recomputed in the backward pass."""
        if not self.backward_end_queued:
            self.backward_end_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)

    def _backward_ended(self) -> None:
        self.backwards += 1
        self.backward_end_queued = False

    # -- weight gradients, moments, parameters -----------------------------------------------------------
    def _parameters(self):
        """(vpp, name, parameter) of the watched modules' trainable parameters (with their children's), each once."""
        seen = set()
        for vpp, prefix, module in self._watched():
            for name, param in module.named_parameters(prefix=prefix):
                if param.requires_grad and id(param) not in seen:
                    seen.add(id(param))
                    yield vpp, name, param

    def _grad(self, param):
        grad = getattr(param, "main_grad", None) if self.params_have_main_grad else None
        return _local(grad if grad is not None else param.grad)

    def _unreduced_hook(self, name: str, vpp: int):
        def hook(param):
            collector = self.collector
            if collector is not None:
                self.note_backward()
            if collector is None or self.micro_step < self.grad_acc_steps - 1 or GRAD_UNREDUCED in collector.failed:
                return
            try:
                grad = self._grad(param)
                if measurable(grad):
                    collector.add(GRAD_UNREDUCED, [(name, grad)], None, vpp)
            except Exception as error:
                collector.guard(GRAD_UNREDUCED, error)

        return hook

    def _add_parameter_group(self, group: str, tensor_of) -> None:
        collector = self.collector
        if group in collector.failed:
            return
        try:
            by_vpp: dict[int, list] = {}
            for vpp, name, param in self.params:
                tensor = tensor_of(param)
                if measurable(tensor):
                    by_vpp.setdefault(vpp, []).append((name, tensor))
            for vpp, named in by_vpp.items():
                collector.add(group, named, None, vpp)
        except Exception as error:
            collector.guard(group, error)

    def _add_expert_gradients(self) -> None:
        """``moe_distribution``: each expert's slice of a fused experts weight's gradient, ``{weight}.expert_{e}``
        (an idle expert's is zero). Under expert parallelism the slices are this rank's local experts."""
        collector = self.collector
        try:
            for vpp, name, param in self.expert_params:
                grad = self._grad(param)
                if measurable(grad):
                    named = [(f"{name}.expert_{e}", part) for e, part in enumerate(grad.unbind(0))]
                    collector.add(GRAD_REDUCED, named, None, vpp)
        except Exception as error:
            collector.guard(GRAD_REDUCED, error)

    def _before_optimizer_step(self) -> None:
        if self.collector is None:
            return
        config = self.run.config
        if config.wg_distribution:
            self._add_parameter_group(GRAD_REDUCED, self._grad)
            self._add_expert_gradients()
            if not self.reduced_apart and not self.sharded:
                self.collector.alias(GRAD_UNREDUCED, GRAD_REDUCED)
        if config.param_distribution:
            self._add_parameter_group(PARAM_ORIGIN, lambda p: _local(p.detach()))

    def _after_optimizer_step(self) -> None:
        dumped, self.alert_dump = self.alert_dump, None
        alert = None
        try:
            if dumped is not None:
                dumped.stop()
            alert = self._finish_step()
            if alert is not None and self.run.config.alert_dump and dumped is None:
                self._arm_dump()
        except Exception as error:  # writing failed (a full disk...): the run goes on
            logger.warning("monitor: step %d not written: %s: %s", self.step, type(error).__name__, error)
        self.step += 1
        self.backwards = 0
        if self.run.reload_if_changed():
            self._remove_hooks()
        self._switch()

    def _arm_dump(self) -> None:
        """``alert.dump``: a statistics dump at level mix of the next step, by the existing PrecisionDebugger."""
        from msprobe.pytorch.debugger import PrecisionDebugger

        path = self.run.directory / "alert_dump" / f"step{self.step + 1}"
        self.alert_dump = PrecisionDebugger(dump_path=str(path), task="statistics", level="mix")
        self.alert_dump.start(self.models[0])
        logger.warning("monitor: step %d will be dumped (statistics, mix) to %s", self.step + 1, path)

    def _finish_step(self) -> Alert | None:
        collector = self.collector
        if collector is None:
            return None
        config = self.run.config
        if config.mv_distribution:
            state = self.optimizer.state
            for group, key in MOMENTS:
                self._add_parameter_group(group, lambda p, key=key: _local(state.get(p, {}).get(key)))
        if config.param_distribution:
            self._add_parameter_group(PARAM_UPDATED, lambda p: _local(p.detach()))
        alert = self.run.write(collector.metrics(self.step, self.rank))
        if self.collectives is not None and config.cc_distribution.log_only:
            self.collectives.write_stacks(self.run.directory)
        return alert

