"""Every module of the three packages imports first, in a fresh interpreter: no import circle anywhere.

An import circle shows only when a module of the circle is the first one imported (another entry point
may have loaded the rest already), so each module is imported by a process that holds no msprobe
module: one interpreter per package loads the libraries once (torch, mindspore, transformers...), forgets
the msprobe modules of that warm-up and forks a child per module, which keeps the walk within seconds.
A package whose framework is missing is skipped (msprobe-common alone needs only numpy). A module may
not bring in what its package must not import (docs/architecture.md, the table of distributions).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
# package directory → (its import name, what its interpreter imports before forking, what it must not import)
GROUPS = {
    "msprobe-common": ("msprobe.core", ("numpy",),
                       ("torch", "torch_npu", "mindspore", "msprobe.pytorch", "msprobe.mindspore")),
    "msprobe-pytorch": ("msprobe.pytorch", ("numpy", "torch"), ("mindspore", "msprobe.mindspore")),
    "msprobe-mindspore": ("msprobe.mindspore", ("numpy", "mindspore"), ("msprobe.pytorch",)),  # run_ut benches on torch
}
CHILD_SECONDS = 120  # one module's import, framework already loaded

# Runs in the package's interpreter. Warm-up: import the framework and every module once (what is
# forbidden refused), then forget every msprobe module; the libraries they loaded stay, so each child
# spends its time on msprobe alone. Then one child per module imports it and prints one JSON line; the
# interpreter prints the line of a child that died silently.
FORK_EACH = """
import importlib, importlib.abc, json, os, signal, sys
preload, forbidden, modules, seconds = json.loads(sys.argv[1])

def among(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if among(name, forbidden):
            raise ImportError(f"{name} is refused during the warm-up")
        return None

for name in preload:
    importlib.import_module(name)
assert not [m for m in sys.modules if among(m, ["msprobe"])], "msprobe imported before the walk"
sys.meta_path.insert(0, Refuse())
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
del sys.meta_path[0]
for name in [m for m in sys.modules if among(m, ["msprobe"])]:
    del sys.modules[name]

def import_one(name):
    signal.alarm(seconds)
    try:
        importlib.import_module(name)
        brought = [f for f in forbidden if any(among(m, [f]) for m in sys.modules)]
        return f"imports {', '.join(brought)}" if brought else ""
    except BaseException as error:
        return f"{type(error).__name__}: {error}"

for name in modules:
    sys.stdout.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        with os.fdopen(write, "w") as out:
            out.write(import_one(name))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        error = answer.read()
    status = os.waitpid(pid, 0)[1]
    if status != 0:
        error = f"the importing process ended with wait status {status}: {error}"
    print(json.dumps({"module": name, "error": error or None}))
"""


def modules_of(package: str) -> list[str]:
    """Every module under ``packages/<package>/src/msprobe`` (``__main__``, a script, left out)."""
    src = PACKAGES / package / "src"
    names = []
    for path in sorted((src / "msprobe").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.fixture(scope="module")
def walks():
    """The three walks, started together (they run in parallel); a package that is not installed, or
    whose framework is missing, maps to what is missing instead."""
    started = {}
    for package, (name, preload, forbidden) in GROUPS.items():
        missing = [module for module in (name, *preload) if importlib.util.find_spec(module) is None]
        if missing:
            started[package] = missing
            continue
        argument = json.dumps([preload, forbidden, modules_of(package), CHILD_SECONDS])
        started[package] = subprocess.Popen([sys.executable, "-c", FORK_EACH, argument],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield started
    for process in started.values():
        if isinstance(process, subprocess.Popen) and process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("package", GROUPS)
def test_every_module_imports_first_in_a_fresh_interpreter(walks, package):
    process = walks[package]
    if not isinstance(process, subprocess.Popen):
        pytest.skip(f"{package}: not installed: {', '.join(process)}")
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["module"] for r in results] == modules_of(package)
    failures = {r["module"]: r["error"] for r in results if r["error"] is not None}
    assert failures == {}


def test_the_walk_finds_the_modules_of_every_layer():
    """The walk is what the test relies on: packages, plain modules and nested ones, in every package."""
    common = modules_of("msprobe-common")
    assert {"msprobe.core", "msprobe.core.config", "msprobe.core.config.load", "msprobe.core.tasks.registry",
            "msprobe.core.contract"} <= set(common)
    assert "msprobe.core.__main__" not in common
    assert "msprobe.pytorch.debugger" in modules_of("msprobe-pytorch")
    assert "msprobe.mindspore.debugger" in modules_of("msprobe-mindspore")
