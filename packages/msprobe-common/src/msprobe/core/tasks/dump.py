"""Tasks ``statistics`` and ``tensor`` (docs/pytorch/dump.md#tasks-and-levels): every selected call, as statistics or
tensors.

Level L2 is the framework's own kernel dump (:meth:`~msprobe.core.contract.FrameworkKit.kernel_dump`);
the other levels run a :class:`~msprobe.core.lifecycle.session.Session` with the dump collector.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from msprobe.core.config.errors import Problem
from msprobe.core.config.fields import FieldReader, one_of
from msprobe.core.config.frameworks import names_with
from msprobe.core.config.model import DATA_MODES, DEBUG_LEVEL, DebuggerConfig
from msprobe.core.config.rules import API_FULL_NAME, MODULE_FULL_NAME, RuleContext
from msprobe.core.contract import FrameworkKit, Runner
from msprobe.core.dump.collector import DumpCollector
from msprobe.core.dump.debug.save import build_debug_save
from msprobe.core.dump.json_files import DumpIdentity
from msprobe.core.lifecycle.rows import RowSelection, RowSlice, read_request_id, read_slices, row_problems
from msprobe.core.lifecycle.select import selector_for
from msprobe.core.lifecycle.session import Session
from msprobe.core.tasks.online_run_ut import OnlineRunUtConfig, build_online_run_ut, online_rules
from msprobe.core.tasks.registry import Task, register

SUMMARY_MODES = ("statistics", "md5", "xor")
FILE_FORMATS = ("npy", "bin")
_NAME_REGEX = re.compile(r"name-regex\((.*)\)")
_STATIC_GRAPH_DATA_MODES = ("all", "input", "output")
_STATIC_GRAPH = f"{names_with(lambda c: c.static_graph_l2)} static graph"


@dataclass(frozen=True)
class _Filters:
    """Which calls a dump keeps (``api_list`` is the JSON key ``list``)."""

    scope: tuple[str, ...] = ()
    api_list: tuple[str, ...] = ()
    data_mode: tuple[str, ...] = ("all",)
    # the rows of each tensor that are kept (JSON ``slice``; docs/pytorch/inference.md), the request's rows
    slices: tuple[RowSlice, ...] = ()
    request_id: str | None = None


@dataclass(frozen=True)
class StatisticsConfig(_Filters):
    """Section ``statistics``: the filters, and whether to summarise tensors by statistics, statistics and
    CRC-32 (md5), or a 64-bit XOR checksum alone (xor)."""

    summary_mode: str = "statistics"
    tensor_list: tuple[str, ...] = ()  # APIs (kinds or full names) whose tensors are saved too


@dataclass(frozen=True)
class TensorConfig(_Filters):
    """Section ``tensor``: the same filters as statistics, plus how tensors are saved, or 1.1.1's keys of
    online run_ut, which streams them instead (handed over by :meth:`online`)."""

    file_format: str = "npy"
    online_run_ut: bool = False
    nfs_path: str | None = None
    host: str | None = None
    port: int | None = None
    tls_path: str = "./"
    online_run_ut_recompute: bool = False

    def online(self) -> OnlineRunUtConfig | None:
        """Online run_ut's own section when ``online_run_ut`` is set (None: tensors go to files)."""
        if not self.online_run_ut:
            return None
        return OnlineRunUtConfig(nfs_path=self.nfs_path, host=self.host, port=self.port, tls_path=self.tls_path,
                                 recompute=self.online_run_ut_recompute)


# ---------------------------------------------------------------------------------- reading the section
def data_mode(reader: FieldReader) -> tuple[str, ...]:
    value = reader.raw.get("data_mode")
    if value is None:
        return StatisticsConfig.data_mode
    if not isinstance(value, list) or not value:
        reader.report("data_mode", value, f'a non-empty list of {one_of(DATA_MODES)} ("all" alone)')
        return StatisticsConfig.data_mode
    for index, mode in enumerate(value):
        if mode not in DATA_MODES:
            reader.report("data_mode", mode, one_of(DATA_MODES), index)
    if "all" in value and len(value) > 1:
        reader.report(
            "data_mode", value, '["all"] alone, or any combination of the other modes without "all"'
        )
    if "data_mode" in reader.invalid:
        return StatisticsConfig.data_mode
    return tuple(dict.fromkeys(value))


def filters(reader: FieldReader) -> dict:
    """The filter keys every dump section has (scope, list, data_mode, slice, request_id), as dataclass fields."""
    return {"scope": reader.names("scope"), "api_list": reader.names("list"), "data_mode": data_mode(reader),
            "slices": read_slices(reader), "request_id": read_request_id(reader)}


def parse_statistics(reader: FieldReader) -> StatisticsConfig:
    return StatisticsConfig(
        **filters(reader),
        summary_mode=reader.choice("summary_mode", SUMMARY_MODES, StatisticsConfig.summary_mode),
        tensor_list=reader.names("tensor_list"),
    )


def parse_tensor(reader: FieldReader) -> TensorConfig:
    return TensorConfig(
        **filters(reader),
        file_format=reader.choice("file_format", FILE_FORMATS, TensorConfig.file_format),
        online_run_ut=reader.flag("online_run_ut", False),
        nfs_path=reader.optional_text("nfs_path"),
        host=reader.optional_text("host"),
        port=reader.port("port"),
        tls_path=reader.text("tls_path", TensorConfig.tls_path),
        online_run_ut_recompute=reader.flag("online_run_ut_recompute", False),
    )


# ---------------------------------------------------------------------------------- cross-field rules
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
    if ctx.capabilities.one_api_l2 and ctx.level == "L2":
        names = section.api_list
        if len(names) != 1 or not API_FULL_NAME.fullmatch(names[0]):
            yield Problem(
                ctx.path("list"),
                list(names),
                "exactly one full API name like 'Functional.linear.0.backward' "
                f"({ctx.capabilities.display} level L2 dumps one API call per step: its kernels on an Ascend "
                "NPU, its aten operators elsewhere, each operator's inputs and outputs — for a whole step "
                "that would be far too much data; find the API with an L1 dump first)",
            )
    for index, name in enumerate(section.api_list):
        match = _NAME_REGEX.fullmatch(name)
        if match is None:
            continue
        if not ctx.static_graph:
            yield Problem(
                f"{ctx.path('list')}[{index}]",
                name,
                f"name-regex(...) only in {_STATIC_GRAPH} (level L2)",
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
            f"a single element, {one_of(_STATIC_GRAPH_DATA_MODES)}, in {_STATIC_GRAPH} (level L2)",
        )
    if isinstance(section, StatisticsConfig) and ctx.static_graph and section.summary_mode != "statistics":
        yield Problem(ctx.path("summary_mode"), section.summary_mode, f"'statistics' in {_STATIC_GRAPH} (level L2)")
    if isinstance(section, TensorConfig) and section.file_format == "bin" and not ctx.static_graph:
        yield Problem(
            ctx.path("file_format"), "bin", f"'npy'; 'bin' only in {_STATIC_GRAPH} (level L2)"
        )


def _rows(ctx: RuleContext, section: StatisticsConfig | TensorConfig, online: bool) -> Iterator[Problem]:
    """``slice`` and ``request_id`` select rows of the tensors msprobe's hooks read: not at level L2, not
    for online run_ut (its receiver replays whole calls)."""
    if not ctx.usable("slice", "request_id", "level"):
        return
    yield from row_problems(ctx.path("slice"), section.slices, section.request_id)
    where = "at level L2 (they apply to L0, L1 and mix)" if ctx.level == "L2" else \
        "with online_run_ut (its receiver replays whole calls)" if online else None
    if where is not None and section.slices:
        yield Problem(ctx.path("slice"), [asdict(item) for item in section.slices], f"[] {where}")
    if where is not None and section.request_id:
        yield Problem(ctx.path("request_id"), section.request_id, f"null {where}")


def dump_rules(ctx: RuleContext) -> Iterator[Problem]:
    section = ctx.section
    assert isinstance(section, (StatisticsConfig, TensorConfig))
    yield from _scope(ctx, section)
    yield from _api_list(ctx, section)
    yield from _dump_modes(ctx, section)
    online = section.online() if isinstance(section, TensorConfig) else None
    yield from _rows(ctx, section, online is not None)
    if online is not None:
        yield from online_rules(ctx, online)


# ---------------------------------------------------------------------------------- what runs
def build_dump(config: DebuggerConfig, kit: FrameworkKit, on_finish: Callable[[], None]) -> Runner:
    """The dump collector in a session at L0, L1, mix; the framework's kernel dump at L2; the variables of
    ``PrecisionDebugger.save`` at level debug; online run_ut's sender when section ``tensor`` hands over to it."""
    if config.level == "L2":
        return kit.kernel_dump(config, on_finish)
    if config.level == DEBUG_LEVEL:
        return build_debug_save(config, kit.adapter(), kit.current_rank, on_finish)
    section = config.section
    online = section.online() if isinstance(section, TensorConfig) else None
    if online is not None:
        return build_online_run_ut(config, online, kit, on_finish)
    statistics = isinstance(section, StatisticsConfig)
    summary_mode = section.summary_mode if statistics else "statistics"
    tensor_list = section.tensor_list if statistics else ()
    identity = DumpIdentity.of(config, with_tensors=config.task == "tensor" or bool(tensor_list))
    rows = RowSelection(section.slices, section.request_id)
    collector = DumpCollector(identity, selector_for(config), kit.adapter(), summary_mode=summary_mode,
                              tensor_list=tensor_list, rows=rows)
    return Session.with_kit(config, collector, kit, on_finish, prepare_model=kit.prepare_for_comparison, rows=rows)


STATISTICS = register(Task("statistics", StatisticsConfig, parse_statistics, (dump_rules,), build_dump,
                           saves_variables=True))
TENSOR = register(Task("tensor", TensorConfig, parse_tensor, (dump_rules,), build_dump, saves_variables=True))
