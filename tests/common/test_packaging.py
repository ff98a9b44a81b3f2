"""Packaging: msprobe.core stays framework-free, and msprobe-common installs and works alone."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "packages"


def test_core_imports_no_framework_in_a_fresh_interpreter():
    code = (
        "import pkgutil, importlib, sys, msprobe.core as core\n"
        "for info in pkgutil.walk_packages(core.__path__, 'msprobe.core.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'mindspore', 'torch_npu')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("package", ["msprobe-common", "msprobe-pytorch", "msprobe-mindspore"])
def test_msprobe_is_an_implicit_namespace_in_every_package(package):
    src = PACKAGES / package / "src" / "msprobe"
    assert src.is_dir()
    assert not (src / "__init__.py").exists()


@pytest.mark.slow
def test_common_alone_gives_a_working_msprobe_command(tmp_path):
    """Build the msprobe-common wheel and install it into an empty venv: no torch, no mindspore."""
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(PACKAGES / "msprobe-common")],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    wheel = next(wheels.glob("msprobe_common-*.whl"))
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), "numpy<2"],
        capture_output=True, text=True, timeout=600,
    )
    assert install.returncode == 0, install.stderr
    msprobe = env_dir / "bin" / "msprobe"
    shown = subprocess.run([str(msprobe), "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "grad_compare" in shown.stdout and "installed frameworks: none" in shown.stdout
    version = subprocess.run([str(msprobe), "--version"], capture_output=True, text=True, timeout=120)
    assert version.stdout.split() == ["msprobe-common", "0.1.0"]
    missing = subprocess.run([str(msprobe), "-f", "pytorch", "compare"], capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0
    assert "pip install msprobe-pytorch" in missing.stderr
    imports = subprocess.run(
        [str(python), "-c", "import msprobe.core.config, msprobe.core.writers, sys;"
         "print('torch' in sys.modules, 'mindspore' in sys.modules)"],
        capture_output=True, text=True, timeout=120,
    )
    assert imports.stdout.split() == ["False", "False"], imports.stderr


CORE = PACKAGES / "msprobe-common" / "src" / "msprobe" / "core"
LIFECYCLE = ("session.py", "debugger.py", "calls.py", "events.py", "kit.py")
TASK_MODULES = ("msprobe.core.collector", "msprobe.core.overflow", "msprobe.core.free_benchmark",
                "msprobe.core.grad_probe", "msprobe.core.tasks.")


def _imports(path: Path) -> list[str]:
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("module", LIFECYCLE)
def test_the_lifecycle_imports_no_task(module):
    """A task is found through the registry (``msprobe.core.tasks``); the lifecycle never names one, so
    adding a task touches only its own module and its registration."""
    imported = _imports(CORE / module)
    offending = [name for name in imported
                 if name != "msprobe.core.tasks.registry" and name.startswith(TASK_MODULES)]
    assert offending == []
    assert not any(name.startswith("msprobe.core.tasks") for name in imported if module != "debugger.py")
