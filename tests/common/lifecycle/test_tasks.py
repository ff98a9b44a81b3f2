"""The task registry: a task is one module that registers itself; config and debugger find it by name.

The configuration never registers a task; the debugger and the ``msprobe`` command register the built-in
ones before they read a config.json. What a program sees is checked in a fresh interpreter each, since
this test process registered them already (``tests/conftest.py``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from msprobe.core.config import ConfigError, load_config, load_debugger_config
from msprobe.core.tasks.builtin import BUILTIN_MODULES
from msprobe.core.tasks.registry import task_named, task_names

HERE = Path(__file__).parents[1]
BUILT_IN = ("statistics", "tensor", "free_benchmark", "grad_probe", "overflow_check", "run_ut", "structure")


def run_fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter that can import the numpy framework of the tests."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r})\n" + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_every_built_in_task_is_registered_with_its_section():
    assert task_names() == BUILT_IN  # the order of every "allowed:" list
    assert task_named("run_ut").build is None  # configures the run_ut command, not the debugger
    assert all(task_named(name).build is not None for name in task_names() if name != "run_ut")
    for name in task_names():
        module = sys.modules[task_named(name).section.__module__]
        assert module.__name__.rsplit(".", 1)[1] in BUILTIN_MODULES


def test_an_unregistered_task_is_a_lookup_error_naming_the_loader():
    with pytest.raises(LookupError, match=r"no task 'nan_count' is registered .*load_builtin_tasks\(\)"):
        task_named("nan_count")


def test_the_configuration_registers_no_task():
    """Importing the configuration (and the registry it reads) loads no task module and registers none."""
    result = run_fresh("""
        import msprobe.core.config, msprobe.core.tasks.registry as registry
        print(registry.task_names(), [m for m in sys.modules if m.startswith("msprobe.core.tasks.")])
    """)
    assert result.stdout.split() == ["()", "['msprobe.core.tasks.registry']"]


def test_a_debugger_sees_every_task_and_names_them_all_for_an_unknown_one(tmp_path):
    """The debugger registers the built-in tasks itself: its ConfigError lists every one of them."""
    result = run_fresh(f"""
        from msprobe.core.config import ConfigError
        from msprobe.core.lifecycle.debugger import BaseDebugger
        from numpy_adapter import NumpyKit

        class NumpyDebugger(BaseDebugger):
            kit_class = NumpyKit

        try:
            NumpyDebugger(task="nan_count", dump_path={str(tmp_path / "d")!r})
        except ConfigError as error:
            print(error)
    """)
    line = next(line for line in result.stdout.splitlines() if "nan_count" in line)
    assert line.strip().startswith("task (argument): got 'nan_count'; allowed:")
    assert line.endswith(", ".join(repr(name) for name in BUILT_IN))  # in the registry's order


def test_the_msprobe_command_registers_every_task_before_it_runs_one(tmp_path):
    """A command that reads a config.json (run_ut) finds every task; the check runs a framework-free one."""
    result = run_fresh(f"""
        from msprobe.core import cli
        from msprobe.core.tasks.registry import task_names

        missing = {str(tmp_path / "missing.csv")!r}
        try:
            cli.main(["api_precision_compare", "-npu", missing, "-gpu", missing, "-o", {str(tmp_path)!r}])
        except BaseException:
            pass
        print(" ".join(task_names()))
    """)
    assert result.stdout.split()[-len(BUILT_IN):] == list(BUILT_IN)


def test_a_new_task_needs_only_its_module_and_registration(tmp_path):
    """The worked example of docs/architecture.md, registered from outside msprobe: the loader reads and
    validates its section, warns about unknown keys, and the lifecycle builds what it returns."""
    code = f"""
        import json, logging
        logging.basicConfig(format="%(message)s")
        from dataclasses import dataclass
        from msprobe.core.config import ConfigError, load_debugger_config
        from msprobe.core.tasks.registry import Task, register

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
        print(config.task, config.section_as(NanCountConfig).max_entries)
        json.dump({{"task": "nan_count", "dump_path": "d", "nan_count": {{"max_entries": 0}}}}, open(path, "w"))
        try:
            load_debugger_config(path, framework="pytorch")
        except ConfigError as error:
            print("error:", error)
    """
    result = run_fresh(code)
    assert "nan_count 7" in result.stdout
    assert "nan_count.max_entries" in result.stdout and "an integer > 0" in result.stdout
    assert "did you mean 'max_entries'?" in result.stderr


def test_a_task_for_a_command_is_refused_by_the_debugger_only(tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"task": "run_ut", "dump_path": "d"}')
    assert load_config(str(config), framework="pytorch").task == "run_ut"
    with pytest.raises(ConfigError, match="run_ut configures the `msprobe -f pytorch run_ut` command"):
        load_debugger_config(str(config), framework="pytorch")
