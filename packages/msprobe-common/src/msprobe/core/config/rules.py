"""Cross-field rules: combinations of individually valid values that cannot work together.

The rules come from the msprobe 1.1.1 reference (which framework supports what, which levels
a task runs at, the free-benchmark combinations). A rule is skipped when one of its keys was
already reported invalid, so a single typo does not produce a second, confusing problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import one_of
from msprobe.core.config.model import (
    FreeBenchmarkConfig,
    OverflowCheckConfig,
    RunUtConfig,
    SectionConfig,
    StatisticsConfig,
    TensorConfig,
)
from msprobe.core.log import logger

API_FULL_NAME = re.compile(r"[A-Za-z]\w*\.\S+\.\d+\.(forward|backward)")
MODULE_FULL_NAME = re.compile(r"(Module|Cell)\.\S+\.(forward|backward)\.\d+")
_NAME_REGEX = re.compile(r"name-regex\((.*)\)")
_STATIC_GRAPH_DATA_MODES = ("all", "input", "output")


@dataclass(frozen=True)
class RuleContext:
    """The values a rule looks at, and where the user wrote each one (for the problem's path)."""

    framework: str
    task: str
    level: str
    enable_dataloader: bool
    section: SectionConfig
    paths: Mapping[str, str]
    invalid: frozenset[str]

    def path(self, key: str) -> str:
        return self.paths.get(key, f"{self.task}.{key}")

    def usable(self, *keys: str) -> bool:
        return not self.invalid.intersection(keys)

    @property
    def static_graph(self) -> bool:
        return self.framework == "mindspore" and self.level == "L2"


Rule = Callable[[RuleContext], Iterator[Problem]]


def _common(ctx: RuleContext) -> Iterator[Problem]:
    if ctx.framework == "mindspore" and ctx.task == "run_ut" and ctx.usable("task"):
        yield Problem(
            ctx.path("task"), "run_ut", "a task other than 'run_ut' on MindSpore (run_ut is PyTorch only)"
        )
    if ctx.framework == "mindspore" and ctx.enable_dataloader:
        yield Problem(
            ctx.path("enable_dataloader"), True, "false on MindSpore (enable_dataloader is PyTorch only)"
        )
    if ctx.task == "overflow_check" and ctx.usable("level"):
        levels = ("L0", "L1", "L2") if ctx.framework == "mindspore" else ("L0", "L1")
        if ctx.level not in levels:
            note = " (L2: MindSpore static graph)" if ctx.framework == "mindspore" else " for PyTorch"
            yield Problem(ctx.path("level"), ctx.level, f"{one_of(levels)} for task overflow_check{note}")


def _scope(ctx: RuleContext, section: StatisticsConfig | TensorConfig) -> Iterator[Problem]:
    if not section.scope or not ctx.usable("scope"):
        return
    if ctx.level == "L2" and ctx.usable("level"):
        yield Problem(
            ctx.path("scope"), list(section.scope), "[] at level L2 (scope applies to L0, L1 and mix)"
        )
    elif len(section.scope) != 2:
        yield Problem(
            ctx.path("scope"),
            list(section.scope),
            "[] or exactly two full names: the first and last of a range",
        )
    else:
        for index, name in enumerate(section.scope):
            if not (API_FULL_NAME.fullmatch(name) or MODULE_FULL_NAME.fullmatch(name)):
                yield Problem(
                    f"{ctx.path('scope')}[{index}]",
                    name,
                    "a full API name like 'Tensor.add.0.forward' "
                    "or module name like 'Module.fc1.Linear.forward.0'",
                )


def _api_list(ctx: RuleContext, section: StatisticsConfig | TensorConfig) -> Iterator[Problem]:
    if not ctx.usable("list", "level"):
        return
    if ctx.framework == "pytorch" and ctx.level == "L2":
        names = section.api_list
        if len(names) != 1 or not API_FULL_NAME.fullmatch(names[0]):
            yield Problem(
                ctx.path("list"),
                list(names),
                "exactly one full API name like 'Functional.linear.0.backward' "
                "(PyTorch level L2 kernel dump)",
            )
    for index, name in enumerate(section.api_list):
        match = _NAME_REGEX.fullmatch(name)
        if match is None:
            continue
        if not ctx.static_graph:
            yield Problem(
                f"{ctx.path('list')}[{index}]",
                name,
                "name-regex(...) only in MindSpore static graph (level L2)",
            )
            continue
        try:
            re.compile(match.group(1))
        except re.error as error:
            yield Problem(
                f"{ctx.path('list')}[{index}]",
                name,
                f"a valid regular expression inside name-regex(...) ({error})",
            )


def _dump_modes(ctx: RuleContext, section: StatisticsConfig | TensorConfig) -> Iterator[Problem]:
    if not ctx.usable("level"):
        return
    if (
        ctx.static_graph
        and ctx.usable("data_mode")
        and (len(section.data_mode) != 1 or section.data_mode[0] not in _STATIC_GRAPH_DATA_MODES)
    ):
        yield Problem(
            ctx.path("data_mode"),
            list(section.data_mode),
            f"a single element, {one_of(_STATIC_GRAPH_DATA_MODES)}, in MindSpore static graph (level L2)",
        )
    if isinstance(section, StatisticsConfig) and ctx.static_graph and section.summary_mode == "md5":
        yield Problem(ctx.path("summary_mode"), "md5", "'statistics' in MindSpore static graph (level L2)")
    if isinstance(section, TensorConfig) and section.file_format == "bin" and not ctx.static_graph:
        yield Problem(
            ctx.path("file_format"), "bin", "'npy'; 'bin' only in MindSpore static graph (level L2)"
        )


def _online(ctx: RuleContext, online: bool, section: TensorConfig | RunUtConfig) -> Iterator[Problem]:
    if not online or section.nfs_path is not None or not ctx.usable("host", "port"):
        return
    if section.host is None:
        yield Problem(ctx.path("host"), None, "the receiver's IP address (online mode without nfs_path)")
    if section.port is None:
        yield Problem(ctx.path("port"), None, "the receiver's port 1..65535 (online mode without nfs_path)")


def _dump(ctx: RuleContext) -> Iterator[Problem]:
    section = ctx.section
    assert isinstance(section, (StatisticsConfig, TensorConfig))
    yield from _scope(ctx, section)
    yield from _api_list(ctx, section)
    yield from _dump_modes(ctx, section)
    if isinstance(section, TensorConfig) and section.online_run_ut:
        if ctx.framework == "mindspore":
            yield Problem(
                ctx.path("online_run_ut"), True, "false on MindSpore (online run_ut is PyTorch only)"
            )
        yield from _online(ctx, True, section)


def _run_ut(ctx: RuleContext) -> Iterator[Problem]:
    assert isinstance(ctx.section, RunUtConfig)
    yield from _online(ctx, ctx.section.is_online, ctx.section)


def _free_benchmark_pytorch_only(ctx: RuleContext, fb: FreeBenchmarkConfig) -> Iterator[Problem]:
    if fb.scope:
        yield Problem(ctx.path("scope"), list(fb.scope), "[] on MindSpore (name the APIs in list instead)")
    if fb.fuzz_device == "cpu":
        yield Problem(ctx.path("fuzz_device"), "cpu", "'npu' on MindSpore ('cpu' is PyTorch only)")
    if fb.pert_mode == "to_cpu":
        yield Problem(
            ctx.path("pert_mode"), "to_cpu", "any mode but 'to_cpu' on MindSpore ('to_cpu' is PyTorch only)"
        )
    if fb.if_preheat:
        yield Problem(ctx.path("if_preheat"), True, "false on MindSpore (preheat is PyTorch only)")


def _free_benchmark(ctx: RuleContext) -> Iterator[Problem]:
    fb = ctx.section
    assert isinstance(fb, FreeBenchmarkConfig)
    if ctx.framework == "mindspore":
        yield from _free_benchmark_pytorch_only(ctx, fb)
    if fb.scope and fb.api_list:
        yield Problem(
            ctx.path("list"), list(fb.api_list), "[] when scope is given (scope and list are exclusive)"
        )
    pytorch = ctx.framework == "pytorch"
    if (
        pytorch
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


def _overflow_check(ctx: RuleContext) -> Iterator[Problem]:
    """No combination is invalid here; a MindSpore-only setting on PyTorch is only worth a warning."""
    assert isinstance(ctx.section, OverflowCheckConfig)
    if ctx.framework == "pytorch" and ctx.section.check_mode != "all":
        logger.warning(
            "%s = %r applies to MindSpore only; ignored on PyTorch",
            ctx.path("check_mode"),
            ctx.section.check_mode,
        )
    yield from ()


_TASK_RULES: dict[str, tuple[Rule, ...]] = {
    "statistics": (_dump,),
    "tensor": (_dump,),
    "run_ut": (_run_ut,),
    "overflow_check": (_overflow_check,),
    "free_benchmark": (_free_benchmark,),
    "grad_probe": (),
}


def cross_field_problems(ctx: RuleContext) -> list[Problem]:
    problems = list(_common(ctx))
    for rule in _TASK_RULES[ctx.task]:
        problems.extend(rule(ctx))
    return problems
