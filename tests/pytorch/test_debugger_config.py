"""Bad configurations fail at PrecisionDebugger construction, before any training step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from msprobe.core.config import ConfigError
from msprobe.core.tasks.registry import task_names
from msprobe.pytorch import PrecisionDebugger


def write_config(tmp_path, config: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_every_bad_key_is_named_at_construction(tmp_path):
    path = write_config(tmp_path, {
        "task": "statistics", "dump_path": str(tmp_path / "out"), "level": "L7", "step": [0, "3-1"],
        "statistics": {"summary_mode": "sha1", "data_mode": ["all", "input"], "scope": ["only_one"]},
    })
    with pytest.raises(ConfigError) as error:
        PrecisionDebugger(config_path=str(path))
    message = str(error.value)
    for key in ("level", "step[1]", "statistics.summary_mode", "statistics.data_mode", "statistics.scope"):
        assert key in message
    assert "'L7'" in message and "'sha1'" in message
    assert not (tmp_path / "out").exists()


def test_a_fresh_program_sees_every_task(tmp_path):
    """``from msprobe.pytorch import PrecisionDebugger`` is all a program imports: the debugger registers
    the built-in tasks, so an unknown task is refused with every allowed one named (as this process,
    whose tasks the test session registered, names them)."""
    code = ("from msprobe.core.config import ConfigError\n"
            "from msprobe.pytorch import PrecisionDebugger\n"
            f"try:\n    PrecisionDebugger(task='statistic', dump_path={str(tmp_path / 'd')!r})\n"
            "except ConfigError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    allowed = ", ".join(repr(name) for name in task_names())
    assert f"task (argument): got 'statistic'; allowed: one of {allowed}" in result.stdout
    assert len(task_names()) == 7


def test_constructor_arguments_are_validated_too(tmp_path):
    with pytest.raises(ConfigError, match="level"):
        PrecisionDebugger(dump_path=str(tmp_path), level="L5")


def test_run_ut_is_not_a_debugger_task(tmp_path):
    path = write_config(tmp_path, {"task": "run_ut", "run_ut": {}})
    with pytest.raises(ConfigError, match="run_ut"):
        PrecisionDebugger(config_path=str(path))


def test_missing_config_file_is_named(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match="nope.json"):
        PrecisionDebugger(config_path=str(missing))


def test_mindspore_only_values_are_refused_for_pytorch_and_vice_versa(tmp_path):
    path = write_config(tmp_path, {
        "task": "free_benchmark", "dump_path": str(tmp_path),
        "free_benchmark": {"pert_mode": "to_cpu", "fuzz_device": "npu"},
    })
    with pytest.raises(ConfigError, match="free_benchmark"):
        PrecisionDebugger(config_path=str(path))


def test_same_configuration_returns_the_running_debugger_and_another_takes_over(tmp_path, msprobe_log):
    first = PrecisionDebugger(dump_path=str(tmp_path / "a"), task="statistics")
    assert PrecisionDebugger(dump_path=str(tmp_path / "a"), task="statistics") is first
    second = PrecisionDebugger(dump_path=str(tmp_path / "b"), task="statistics")
    assert second is not first
    assert "takes over" in msprobe_log.text()
