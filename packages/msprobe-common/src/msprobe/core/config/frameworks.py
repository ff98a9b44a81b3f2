"""What each framework package supports, as data: the configuration rules read these capabilities
instead of comparing framework names.

A framework package's kit carries its :class:`Capabilities` (``kit.capabilities``). They are declared
here, in core, because a configuration is validated before — and without — the framework being
imported (``msprobe.core`` alone validates a config.json); a new framework registers its own with
:func:`register_framework`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    name: str  # the framework key of the configuration ("pytorch")
    display: str  # how messages name it ("PyTorch")
    overflow_levels: tuple[str, ...]  # levels task overflow_check runs at
    static_graph_l2: bool = False  # level L2 is a static-graph kernel dump (name-regex(...), 'bin', one data_mode)
    one_api_l2: bool = False  # level L2 dumps exactly one listed API (kernel dump of one API)
    commands: tuple[str, ...] = ()  # tasks that configure a command of this framework (run_ut)
    dataloader_steps: bool = False  # enable_dataloader (deprecated)
    module_load: bool = False  # the load key: modules fed the inputs of an earlier tensor dump
    online_run_ut: bool = False  # tensor.online_run_ut streams APIs to a run_ut receiver
    free_benchmark_scope_names: bool = False  # free_benchmark.scope lists API full names
    free_benchmark_on_cpu: bool = False  # fuzz_device 'cpu' with pert_mode 'to_cpu'
    free_benchmark_preheat: bool = False  # if_preheat
    overflow_check_modes: bool = False  # overflow_check.check_mode is honoured (else only 'all' has effect)


PYTORCH = Capabilities(
    name="pytorch", display="PyTorch", overflow_levels=("L0", "L1"), one_api_l2=True, commands=("run_ut",),
    dataloader_steps=True, module_load=True, online_run_ut=True, free_benchmark_scope_names=True,
    free_benchmark_on_cpu=True, free_benchmark_preheat=True,
)
MINDSPORE = Capabilities(
    name="mindspore", display="MindSpore", overflow_levels=("L0", "L1", "L2"), static_graph_l2=True,
    commands=("run_ut",), module_load=True, overflow_check_modes=True,
)

_FRAMEWORKS: dict[str, Capabilities] = {c.name: c for c in (PYTORCH, MINDSPORE)}


def register_framework(capabilities: Capabilities) -> None:
    _FRAMEWORKS[capabilities.name] = capabilities


def framework_names() -> tuple[str, ...]:
    return tuple(_FRAMEWORKS)


def capabilities_of(framework: str) -> Capabilities:
    return _FRAMEWORKS[framework]


def names_with(has: Callable[[Capabilities], bool]) -> str:
    """``"MindSpore"``: the frameworks that have a capability, for messages."""
    return " and ".join(c.display for c in _FRAMEWORKS.values() if has(c))


def only_on(has: Callable[[Capabilities], bool]) -> str:
    """``"PyTorch only"``."""
    return names_with(has) + " only"
