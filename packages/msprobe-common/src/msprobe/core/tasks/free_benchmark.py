"""Task ``free_benchmark`` (docs/free_benchmark.md): re-run APIs on perturbed inputs to find unstable ones without a
second device. The work itself lives in :mod:`msprobe.core.free_benchmark`; this module is the task's
configuration and build."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader
from msprobe.core.config.frameworks import only_on
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.config.rules import RuleContext
from msprobe.core.free_benchmark import free_benchmark_collector
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.lifecycle.session import Session
from msprobe.core.tasks.registry import Task, register

FUZZ_DEVICES = ("npu", "cpu")
PERT_MODES = ("improve_precision", "add_noise", "no_change", "bit_noise", "change_value", "to_cpu")
HANDLER_TYPES = ("check", "fix")
FUZZ_LEVELS = ("L1",)
FUZZ_STAGES = ("forward", "backward")


@dataclass(frozen=True)
class FreeBenchmarkConfig:
    """Section ``free_benchmark``: in PyTorch ``scope`` lists API full names, exclusive with ``api_list``."""

    scope: tuple[str, ...] = ()
    api_list: tuple[str, ...] = ()
    fuzz_device: str = "npu"
    pert_mode: str = "improve_precision"
    handler_type: str = "check"
    fuzz_level: str = "L1"
    fuzz_stage: str = "forward"
    if_preheat: bool = False
    preheat_step: int = 15
    max_sample: int = 20


def _positive(reader: FieldReader, key: str, default: int) -> int:
    return reader.integer(key, default, lambda n: n > 0, "an integer > 0")


def parse_free_benchmark(reader: FieldReader) -> FreeBenchmarkConfig:
    defaults = FreeBenchmarkConfig()
    return FreeBenchmarkConfig(
        scope=reader.names("scope"),
        api_list=reader.names("list"),
        fuzz_device=reader.choice("fuzz_device", FUZZ_DEVICES, defaults.fuzz_device),
        pert_mode=reader.choice("pert_mode", PERT_MODES, defaults.pert_mode),
        handler_type=reader.choice("handler_type", HANDLER_TYPES, defaults.handler_type),
        fuzz_level=reader.choice("fuzz_level", FUZZ_LEVELS, defaults.fuzz_level),
        fuzz_stage=reader.choice("fuzz_stage", FUZZ_STAGES, defaults.fuzz_stage),
        if_preheat=reader.flag("if_preheat", defaults.if_preheat),
        preheat_step=_positive(reader, "preheat_step", defaults.preheat_step),
        max_sample=_positive(reader, "max_sample", defaults.max_sample),
    )


def _unsupported_here(ctx: RuleContext, fb: FreeBenchmarkConfig) -> Iterator[Problem]:
    caps = ctx.capabilities
    if fb.scope and not caps.free_benchmark_scope_names:
        yield Problem(ctx.path("scope"), list(fb.scope), f"[] on {caps.display} (name the APIs in list instead)")
    if not caps.free_benchmark_on_cpu:
        where = only_on(lambda c: c.free_benchmark_on_cpu)
        if fb.fuzz_device == "cpu":
            yield Problem(ctx.path("fuzz_device"), "cpu", f"'npu' on {caps.display} ('cpu' is {where})")
        if fb.pert_mode == "to_cpu":
            allowed = f"any mode but 'to_cpu' on {caps.display} ('to_cpu' is {where})"
            yield Problem(ctx.path("pert_mode"), "to_cpu", allowed)
    if fb.if_preheat and not caps.free_benchmark_preheat:
        where = only_on(lambda c: c.free_benchmark_preheat)
        yield Problem(ctx.path("if_preheat"), True, f"false on {caps.display} (preheat is {where})")


def free_benchmark_rules(ctx: RuleContext) -> Iterator[Problem]:
    fb = ctx.section
    assert isinstance(fb, FreeBenchmarkConfig)
    yield from _unsupported_here(ctx, fb)
    if fb.scope and fb.api_list:
        yield Problem(
            ctx.path("list"), list(fb.api_list), "[] when scope is given (scope and list are exclusive)"
        )
    if (
        ctx.capabilities.free_benchmark_on_cpu
        and ctx.usable("fuzz_device", "pert_mode")
        and (fb.fuzz_device == "cpu") != (fb.pert_mode == "to_cpu")
    ):
        key, value = (
            ("pert_mode", fb.pert_mode) if fb.fuzz_device == "cpu" else ("fuzz_device", fb.fuzz_device)
        )
        yield Problem(
            ctx.path(key),
            value,
            "fuzz_device 'cpu' together with pert_mode 'to_cpu', never one without the other",
        )
    if fb.handler_type != "fix" or not ctx.usable("handler_type"):
        return
    if fb.fuzz_stage == "backward" and ctx.usable("fuzz_stage"):
        yield Problem(
            ctx.path("fuzz_stage"),
            "backward",
            "'forward' when handler_type is 'fix' (backward needs 'check')",
        )
    if fb.if_preheat and ctx.usable("if_preheat"):
        yield Problem(ctx.path("if_preheat"), True, "false when handler_type is 'fix'")
    if fb.pert_mode not in ("improve_precision", "to_cpu") and ctx.usable("pert_mode"):
        yield Problem(
            ctx.path("pert_mode"), fb.pert_mode, "'improve_precision' or 'to_cpu' when handler_type is 'fix'"
        )


def build_free_benchmark(config: DebuggerConfig, kit: FrameworkKit, on_finish: Callable[[], None]) -> Runner:
    """The free-benchmark collector in a session that always intercepts APIs (level L1): it re-runs them."""
    if config.is_static_graph:
        raise NotImplementedError(
            "free_benchmark re-runs APIs in PyNative mode; it does not run in MindSpore static graph (level L2)"
        )
    collector = free_benchmark_collector(config, kit.benchmark_ops())
    return Session.with_kit(config, collector, kit, on_finish, level="L1")


FREE_BENCHMARK = register(
    Task("free_benchmark", FreeBenchmarkConfig, parse_free_benchmark, (free_benchmark_rules,), build_free_benchmark)
)
