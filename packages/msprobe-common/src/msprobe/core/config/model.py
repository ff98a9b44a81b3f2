"""The validated configuration: immutable dataclasses whose defaults are those of msprobe 1.1.1.

Hooks and writers receive these objects instead of raw JSON, so they never re-check a value and
cannot change the configuration behind the debugger's back (every class is frozen and holds
tuples, not lists).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeVar, Union

FRAMEWORKS = ("pytorch", "mindspore")
TASKS = ("statistics", "tensor", "overflow_check", "free_benchmark", "run_ut", "grad_probe")
LEVELS = ("L0", "L1", "L2", "mix")
DATA_MODES = ("all", "forward", "backward", "input", "output")
DEFAULT_TASK = "statistics"
DEFAULT_LEVEL = "L1"
DEFAULT_DUMP_PATH = "./dump_path"


@dataclass(frozen=True)
class StatisticsConfig:
    """Section ``statistics``: which calls to summarise (``api_list`` is the JSON key ``list``)."""

    scope: tuple[str, ...] = ()
    api_list: tuple[str, ...] = ()
    data_mode: tuple[str, ...] = ("all",)
    summary_mode: str = "statistics"


@dataclass(frozen=True)
class TensorConfig:
    """Section ``tensor``: the same filters as statistics, plus how tensors are saved or streamed."""

    scope: tuple[str, ...] = ()
    api_list: tuple[str, ...] = ()
    data_mode: tuple[str, ...] = ("all",)
    file_format: str = "npy"
    online_run_ut: bool = False
    nfs_path: str | None = None
    host: str | None = None
    port: int | None = None
    tls_path: str = "./"
    online_run_ut_recompute: bool = False


@dataclass(frozen=True)
class RunUtConfig:
    """Section ``run_ut``: read by the ``msprobe -f pytorch run_ut`` command, not by the debugger."""

    white_list: tuple[str, ...] = ()
    black_list: tuple[str, ...] = ()
    error_data_path: str = "./"
    is_online: bool = False
    nfs_path: str | None = None
    host: str | None = None
    port: int | None = None
    rank_list: tuple[int, ...] = (0,)
    tls_path: str = "./"


@dataclass(frozen=True)
class OverflowCheckConfig:
    """Section ``overflow_check``: ``overflow_nums`` -1 means never stop."""

    overflow_nums: int = 1
    check_mode: str = "all"


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


@dataclass(frozen=True)
class GradProbeConfig:
    """Section ``grad_probe``: ``bounds`` split gradient values into intervals at level L2."""

    grad_level: str = "L1"
    param_list: tuple[str, ...] = ()
    bounds: tuple[float, ...] = (-1.0, 0.0, 1.0)


SECTION_CLASSES = {
    "statistics": StatisticsConfig,
    "tensor": TensorConfig,
    "run_ut": RunUtConfig,
    "overflow_check": OverflowCheckConfig,
    "free_benchmark": FreeBenchmarkConfig,
    "grad_probe": GradProbeConfig,
}


def json_keys(section_class: type) -> tuple[str, ...]:
    """The JSON keys of a section, in declaration order (attribute ``api_list`` is JSON ``list``)."""
    return tuple("list" if field.name == "api_list" else field.name for field in fields(section_class))


SectionConfig = Union[
    StatisticsConfig, TensorConfig, RunUtConfig, OverflowCheckConfig, FreeBenchmarkConfig, GradProbeConfig
]
_Section = TypeVar("_Section", bound=SectionConfig)


@dataclass(frozen=True)
class DebuggerConfig:
    """Common keys plus the one section of the effective task; ``rank``/``step`` () mean all."""

    framework: str
    task: str
    dump_path: str
    rank: tuple[int, ...]
    step: tuple[int, ...]
    level: str
    enable_dataloader: bool
    section: SectionConfig

    def _section_as(self, kind: type[_Section]) -> _Section:
        if not isinstance(self.section, kind):
            raise AttributeError(f"the task is {self.task!r}; its section is not {kind.__name__}")
        return self.section

    @property
    def statistics(self) -> StatisticsConfig:
        return self._section_as(StatisticsConfig)

    @property
    def tensor(self) -> TensorConfig:
        return self._section_as(TensorConfig)

    @property
    def overflow_check(self) -> OverflowCheckConfig:
        return self._section_as(OverflowCheckConfig)

    @property
    def free_benchmark(self) -> FreeBenchmarkConfig:
        return self._section_as(FreeBenchmarkConfig)

    @property
    def grad_probe(self) -> GradProbeConfig:
        return self._section_as(GradProbeConfig)

    @property
    def run_ut(self) -> RunUtConfig:
        return self._section_as(RunUtConfig)

    @property
    def is_static_graph(self) -> bool:
        """MindSpore collects at level L2 through its own graph dump, not through msprobe's hooks."""
        return self.framework == "mindspore" and self.level == "L2"
