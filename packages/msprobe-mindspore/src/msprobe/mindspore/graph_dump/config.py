"""MindSpore's dump configuration, derived from msprobe's ``config.json``
(docs/mindspore/dump.md#static-graph-level-l2-graph_mode-jit).

MindSpore reads the file named by ``MINDSPORE_DUMP_CONFIG`` once per process, when it compiles its first
graph: later changes of the variable or of the file are ignored. So the configuration is written, and the
variable set, when the debugger is constructed — before the network is compiled — and a second, different
L2 configuration in the same process can only be reported, not applied.

MindSpore accepts as its dump ``path`` only an absolute path of ASCII letters, digits, ``-``, ``_`` and ``/``
(checked when the first graph compiles, as a C++ ``RuntimeError``). Any other ``dump_path`` (a hidden folder,
``run.1``, a space) is reached through an alias MindSpore accepts (:mod:`.alias`), so the rule never fails a job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from msprobe.core.config import DebuggerConfig
from msprobe.core.services.fileio import atomic_write_text, make_dir
from msprobe.core.services.log import logger
from msprobe.mindspore.graph_dump.alias import path_for_mindspore

ENV_VAR = "MINDSPORE_DUMP_CONFIG"
CONFIG_FILE_NAME = "kernel_kbyk_dump.json"  # the name msprobe 1.1.1 gives it, in the dump_path
KERNEL_ROOT_NAME = "mindspore_dump"  # where MindSpore writes; msprobe moves the kernel files out
NET_NAME = "Net"
ALL_DEVICES = tuple(range(8))  # MindSpore's support_device accepts device ids 0..7
_INPUT_OUTPUT = {"all": 0, "input": 1, "output": 2}
_OVERFLOW_DETECTION = 3  # op_debug_mode value for overflow detection (Ascend)

_installed: tuple[str, str] | None = None  # (file, content) MindSpore was pointed at in this process


def iteration_text(steps: tuple[int, ...]) -> str:
    """``()`` → ``"all"``; ``(0, 2, 3, 4)`` → ``"0|2-4"`` (MindSpore's iteration syntax)."""
    if not steps:
        return "all"
    runs: list[list[int]] = []
    for step in sorted(set(steps)):
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return "|".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def support_device(ranks: tuple[int, ...]) -> list[int]:
    """Ranks 0..7 select MindSpore's devices directly; higher ranks are filtered by msprobe after the run."""
    if ranks and all(rank in ALL_DEVICES for rank in ranks):
        return sorted(set(ranks))
    return list(ALL_DEVICES)


def saves_statistics_on_device(device_target: str) -> bool:
    """MindSpore computes statistics itself on GPU and Ascend; on CPU it only saves whole tensors."""
    return device_target != "CPU"


def dump_settings(config: DebuggerConfig, kernel_path: str, device_target: str) -> dict:
    """The content of MindSpore's dump configuration for this debugger configuration.

    ``kernel_path`` is where MindSpore writes, in a form it accepts (:func:`.alias.path_for_mindspore`).
    """
    section = config.section
    api_list = getattr(section, "api_list", ())
    common: dict[str, object] = {
        "dump_mode": 1 if api_list else 0,  # 0 dumps every kernel; 1 only those named in "kernels"
        "path": kernel_path,
        "net_name": NET_NAME,
        "iteration": iteration_text(config.step),
        "saved_data": "tensor",
        "input_output": _INPUT_OUTPUT[section.data_mode[0]] if hasattr(section, "data_mode") else 0,
        "kernels": list(api_list),
        "support_device": support_device(config.rank),
    }
    if config.task == "statistics" and saves_statistics_on_device(device_target):
        common["saved_data"] = "statistic"
    if config.task == "tensor" and section.file_format != "npy":
        common["file_format"] = section.file_format  # honoured on Ascend; CPU and GPU always write .npy
    if config.task == "overflow_check" and device_target == "Ascend":
        common["op_debug_mode"] = _OVERFLOW_DETECTION  # MindSpore then keeps only overflowing kernels
    return {"common_dump_settings": common, "e2e_dump_settings": {"enable": True, "trans_flag": True}}


def install(config: DebuggerConfig, device_target: str) -> Path:
    """Write MindSpore's dump configuration into ``dump_path`` and point ``MINDSPORE_DUMP_CONFIG`` at it.

    Through an alias (:mod:`.alias`) the file MindSpore reads is the process's own copy beside its link, so
    that ranks sharing a dump_path, each with its own link, never read another's; the copy in ``dump_path``
    records what was configured. Returns the directory MindSpore's kernel files arrive in
    (``{dump_path}/mindspore_dump``); a ConfigError naming ``dump_path`` when MindSpore can be given no path
    to it.
    """
    global _installed
    root = make_dir(os.path.abspath(config.dump_path))
    kernel_root = make_dir(root / KERNEL_ROOT_NAME)
    kernel_path = path_for_mindspore(kernel_root, config.dump_path)
    record = root / CONFIG_FILE_NAME
    settings_file = record if kernel_path == str(kernel_root) else Path(kernel_path).parent / CONFIG_FILE_NAME
    content = json.dumps(dump_settings(config, kernel_path, device_target), indent=4)
    if _installed is not None and _installed != (str(settings_file), content):
        logger.warning(
            "MindSpore reads its dump configuration once per process, when the first graph compiles: "
            f"the new L2 settings in {settings_file} apply only if no graph has been compiled yet in this "
            "process; otherwise run them in a new process"
        )
    given = os.environ.get(ENV_VAR)
    if given and given != str(settings_file):
        logger.warning(f"{ENV_VAR} was {given!r}; msprobe replaces it with {str(settings_file)!r}")
    for path in {record, settings_file}:
        atomic_write_text(path, content)
    os.environ[ENV_VAR] = str(settings_file)
    _installed = (str(settings_file), content)
    logger.info(f"MindSpore kernel dump configured in {settings_file} ({ENV_VAR} set)")
    return kernel_root
