"""The msprobe command: global options, framework discovery and the core grad_compare command."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from msprobe.core import cli


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "msprobe.core", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.frameworks("pytorch", "mindspore")
def test_version_lists_every_installed_msprobe_package():
    result = run_cli("--version")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["msprobe-common", "msprobe-pytorch", "msprobe-mindspore"]


@pytest.mark.frameworks("pytorch", "mindspore")
def test_help_lists_frameworks_and_core_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "grad_compare" in result.stdout
    assert "installed frameworks: mindspore, pytorch" in result.stdout


@pytest.mark.frameworks("pytorch", "mindspore")
def test_both_frameworks_are_registered_through_entry_points():
    frameworks = cli.installed_frameworks()
    assert set(frameworks) == {"pytorch", "mindspore"}
    for name, entry in frameworks.items():
        framework = entry.load()
        assert all(isinstance(command, cli.Command) for command in framework.commands.values())
        kit_class = framework.load_kit()  # the kit the framework's PrecisionDebugger builds its task from
        assert kit_class.capabilities.name == name
        assert importlib.import_module(f"msprobe.{name}").PrecisionDebugger.kit_class is kit_class


def test_unknown_framework_is_rejected_with_the_choices():
    result = run_cli("-f", "jax", "compare")
    assert result.returncode == 2
    assert "invalid choice: 'jax'" in result.stderr and "pytorch" in result.stderr


@pytest.mark.frameworks("pytorch", "mindspore")
def test_unknown_command_names_it():
    result = run_cli("-f", "pytorch", "no_such_command")
    assert result.returncode == 2
    assert "no_such_command" in result.stderr


def test_grad_compare_reports_a_missing_directory(tmp_path):
    result = run_cli("grad_compare", "-i1", str(tmp_path / "a"), "-i2", str(tmp_path / "b"), "-o", str(tmp_path / "o"))
    assert result.returncode == 1
    assert str(tmp_path / "a") in result.stderr


def test_missing_framework_names_the_package(monkeypatch, capsys):
    monkeypatch.setattr(cli, "installed_frameworks", lambda: {})
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["-f", "mindspore", "compare"])
    assert "pip install msprobe-mindspore" in str(exit_info.value)


@pytest.mark.frameworks("pytorch")
def test_a_commands_own_f_flag_is_not_the_global_framework_option(tmp_path):
    result = run_cli("-f", "pytorch", "compare", "-i", str(tmp_path / "missing.json"), "-o", str(tmp_path), "-f")
    assert "argument -f/--framework" not in result.stderr
    assert "missing.json" in result.stderr  # it got as far as reading its input
