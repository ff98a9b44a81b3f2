"""Packaging: msprobe.core stays framework-free, and msprobe-common installs and works alone."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
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
        [str(python), "-c", "import msprobe.core.config, msprobe.core.dump.json_files, sys;"
         "print('torch' in sys.modules, 'mindspore' in sys.modules)"],
        capture_output=True, text=True, timeout=120,
    )
    assert imports.stdout.split() == ["False", "False"], imports.stderr
    data = subprocess.run(  # package data the wheel must carry: the compare page's CSS and JS, the framework map
        [str(python), "-c", "from msprobe.core.compare.report.html import page_asset;"
         "from msprobe.core.compare.align import builtin;"
         "print(bool(page_asset('page.css')), bool(page_asset('page.js')), bool(builtin().apis))"],
        capture_output=True, text=True, timeout=120,
    )
    assert data.stdout.split() == ["True", "True", "True"], data.stderr


CORE = PACKAGES / "msprobe-common" / "src" / "msprobe" / "core"
# the lifecycle and the configuration: they find a task through the registry and never name one
LIFECYCLE = (*sorted(f"lifecycle/{path.name}" for path in (CORE / "lifecycle").glob("*.py")), "contract.py",
             *sorted(f"config/{path.name}" for path in (CORE / "config").glob("*.py")))
TASK_MODULES = ("msprobe.core.dump.collector", "msprobe.core.dump.overflow", "msprobe.core.free_benchmark",
                "msprobe.core.grad_probe", "msprobe.core.tasks")
REGISTRY = "msprobe.core.tasks.registry"
BUILTIN = "msprobe.core.tasks.builtin"  # registers the built-in tasks: the debugger's to call, not config's


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, and each name of a ``from`` import (``from a import b``: a, a.b)."""
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def _task_module(name: str, allowed: tuple[str, ...]) -> bool:
    if any(name == a or name.startswith(a + ".") for a in allowed):
        return False
    return any(name == t or name.startswith(t + ".") for t in TASK_MODULES)


def test_the_lifecycle_covers_the_configuration():
    assert {"config/load.py", "config/keys.py", "config/model.py", "config/__init__.py"} <= set(LIFECYCLE)


@pytest.mark.parametrize("module", LIFECYCLE)
def test_the_lifecycle_imports_no_task(module):
    """A task is found through the registry (``msprobe.core.tasks.registry``); the lifecycle never names
    one, so adding a task touches only its own module and its registration. The debugger (like the
    ``msprobe`` command) registers the built-in tasks; the configuration only reads the registry."""
    allowed = (REGISTRY, BUILTIN) if module == "lifecycle/debugger.py" else (REGISTRY,)
    offending = [name for name in _imports(CORE / module) if _task_module(name, allowed)]
    assert offending == []


def test_the_registry_imports_nothing_of_msprobe_at_run_time():
    """The configuration imports the registry and the task modules import the configuration: the
    registry must stay a leaf, or the first module imported of that circle fails."""
    code = ("import sys, msprobe.core.tasks.registry\n"
            "face = ('msprobe.core.services', 'msprobe.core.services.lazy')  # msprobe.core's own lazy exports\n"
            "print(sorted(m for m in sys.modules if m.startswith('msprobe.core.') and m not in face))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["['msprobe.core.tasks',", "'msprobe.core.tasks.registry']"]


def test_configuring_a_dump_that_does_not_stream_imports_no_transport():
    """Online run_ut is its own task module (``tasks/online_run_ut.py``), which loads the online wing only
    when a run streams: reading every task's section loads neither a transport (nor ssl) nor the sender."""
    code = ("import sys\n"
            "from msprobe.core.tasks.builtin import load_builtin_tasks\n"
            "from msprobe.core.config import load_config\n"
            "load_builtin_tasks()\n"
            "for task in ('statistics', 'tensor', 'overflow_check', 'run_ut'):\n"
            "    load_config(framework='pytorch', task=task)\n"
            "print(sorted(m for m in sys.modules if m.startswith('msprobe.core.online') or m == 'ssl'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"]
