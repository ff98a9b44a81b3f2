"""The validated configuration: immutable dataclasses whose defaults are those of msprobe 1.1.1.

Hooks and writers receive these objects instead of raw JSON, so they never re-check a value and
cannot change the configuration behind the debugger's back (every class is frozen and holds
tuples, not lists).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from msprobe.core.config.frameworks import capabilities_of

S = TypeVar("S")

LEVELS = ("L0", "L1", "L2", "mix", "debug")
DEBUG_LEVEL = "debug"  # PrecisionDebugger.save only, no hooks (docs/pytorch/dump.md#level-debug-save)
DATA_MODES = ("all", "forward", "backward", "input", "output")
DEFAULT_TASK = "statistics"
DEFAULT_LEVEL = "L1"
DEFAULT_DUMP_PATH = "./dump_path"
DEFAULT_CUSTOM_OP_NAMESPACES = ("_C_ascend",)  # 26.2.0's default: vLLM-Ascend's operators


@dataclass(frozen=True)
class ModuleLoad:
    """The validated ``load`` section: replay ``modules``' recorded inputs from the dump at ``path``."""

    path: str
    modules: tuple[str, ...]
    step: tuple[int, ...] = ()  # the steps that load (each from the same step of the dump); () every step
    rank: tuple[int, ...] = ()  # the ranks that load; () every rank
    dump_after_load: bool = False  # false: only feed the inputs, write no dump (26.2.0's default)


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
    section: Any  # the frozen section dataclass of the task's module (msprobe.core.tasks)
    risk_level: str = "ALL"  # which API calls a dump keeps (msprobe.core.lifecycle.risk): CORE, FOCUS or ALL
    low_risk_apis: tuple[str, ...] = ()  # API kinds added to the shipped low-risk list
    dump_enable: bool | None = None  # None: not in the file, capture is on and the file is not watched
    dump_format: str = "1.1.1"  # the files' layout: msprobe 1.1.1's or ("26") 26.2.0's, docs/dump_format.md
    # torch.ops.<ns> whose operators are recorded as APIs ``{ns}.{op}`` (docs/pytorch/dump.md#custom-apis)
    custom_op_namespaces: tuple[str, ...] = DEFAULT_CUSTOM_OP_NAMESPACES
    load: ModuleLoad | None = None  # module input replay (docs/config.md#load); None: not configured
    # the absolute path of config.json (None without one), where dump_enable is re-read; not a setting
    config_file: str | None = field(default=None, compare=False)

    def section_as(self, kind: type[S]) -> S:
        """The task's section, typed as ``kind`` (its class, from the task's module); a TypeError when the
        task's section is of another class."""
        if not isinstance(self.section, kind):
            raise TypeError(
                f"the task is {self.task!r}; its section is a {type(self.section).__name__}, not a {kind.__name__}"
            )
        return self.section

    @property
    def is_static_graph(self) -> bool:
        """Level L2 is the framework's static-graph kernel dump (MindSpore), not msprobe's hooks."""
        return capabilities_of(self.framework).static_graph_l2 and self.level == "L2"
