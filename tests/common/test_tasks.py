"""The task registry: a task is one module that registers itself; config and debugger find it by name."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from msprobe.core.config import ConfigError, load_config
from msprobe.core.tasks import task_named, task_names


def test_every_built_in_task_is_registered_with_its_section():
    assert set(task_names()) == {"statistics", "tensor", "overflow_check", "free_benchmark", "run_ut", "grad_probe"}
    assert task_named("run_ut").build is None  # configures the run_ut command, not the debugger
    assert all(task_named(name).build is not None for name in task_names() if name != "run_ut")


def test_a_new_task_needs_only_its_module_and_registration(tmp_path):
    """The worked example of docs/architecture.md, registered from outside msprobe: the loader reads and
    validates its section, warns about unknown keys, and the lifecycle builds what it returns."""
    code = textwrap.dedent(f"""
        import json, logging
        logging.basicConfig(format="%(message)s")
        from dataclasses import dataclass
        from msprobe.core.config import ConfigError, load_debugger_config
        from msprobe.core.tasks import Task, register

        @dataclass(frozen=True)
        class NanCountConfig:
            max_entries: int = 100

        def parse(reader):
            return NanCountConfig(reader.integer("max_entries", 100, lambda n: n > 0, "an integer > 0"))

        register(Task("nan_count", NanCountConfig, parse, rules=(), build=lambda config, kit, done: None))
        path = {str(tmp_path / "c.json")!r}
        json.dump({{"task": "nan_count", "dump_path": {str(tmp_path / "d")!r},
                   "nan_count": {{"max_entries": 7, "max_entrys": 1}}}}, open(path, "w"))
        config = load_debugger_config(path, framework="pytorch")
        print(config.task, config.nan_count.max_entries)
        json.dump({{"task": "nan_count", "dump_path": "d", "nan_count": {{"max_entries": 0}}}}, open(path, "w"))
        try:
            load_debugger_config(path, framework="pytorch")
        except ConfigError as error:
            print("error:", error)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "nan_count 7" in result.stdout
    assert "nan_count.max_entries" in result.stdout and "an integer > 0" in result.stdout
    assert "did you mean 'max_entries'?" in result.stderr


def test_a_task_for_a_command_is_refused_by_the_debugger_only(tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"task": "run_ut", "dump_path": "d"}')
    assert load_config(str(config), framework="pytorch").task == "run_ut"
    from msprobe.core.config import load_debugger_config

    with pytest.raises(ConfigError, match="run_ut configures the `msprobe -f pytorch run_ut` command"):
        load_debugger_config(str(config), framework="pytorch")
