"""Every import of msprobe inside a function, in the three packages, with the reason it is not at the top.

A function-local import hides an arrow between modules: from the import graph, from ``test_imports.py``'s
fresh interpreters, from a reader. Each one is listed here with why it waits; a new unlisted one, or a listed
one that is gone, fails (docs/architecture.md#three-packages).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[3] / "packages"

COMMAND = "a command module is imported by `msprobe --help`: its framework (torch/mindspore) loads when it runs"
RAY = "Ray is the optional extra msprobe-common[ray]: imported only when --engine ray is chosen"
LOCAL: dict[tuple[str, str], str] = {
    ("core/cli.py", "msprobe.core.grad_probe"): "grad_probe's compare loads matplotlib: only when that command runs",
    ("core/cli.py", "msprobe.core.run_ut.precision_compare"): "the precision compare loads when its command runs",
    ("core/engine/__init__.py", "msprobe.core.engine.local"): "the engine's process pools start when one is opened",
    ("core/engine/__init__.py", "msprobe.core.engine.ray_engine"): RAY,
    ("core/run_ut/parallel.py", "msprobe.core.engine.ray_engine"): RAY + " (a part on a Ray worker)",
    ("core/graph/command.py", "msprobe.core.graph.run"): "the graph builder loads when `msprobe graph` runs",
    ("core/tasks/online_run_ut.py", "msprobe.core.online.collector"):
        "the transports (ssl, sockets, the sender thread) load only when a run streams",
    ("pytorch/cli.py", "msprobe.pytorch.online.receive"): COMMAND + "; the receiver is handed to run_ut here, "
        "so run_ut never imports the receiver that replays with it",
    ("pytorch/cli.py", "msprobe.pytorch.run_ut.attribution"): COMMAND,
    ("pytorch/cli.py", "msprobe.pytorch.tensor_files"): COMMAND,
    ("pytorch/compare.py", "msprobe.pytorch.run_ut.attribution"): "the replay core loads only with --attribute",
    ("pytorch/kit.py", "msprobe.pytorch.kernel_dump"): "the kernel dump (torch_npu's on an NPU) loads at level L2 only",
    ("pytorch/kit.py", "msprobe.pytorch.online.tensors"): "online run_ut's wire format loads only when a run streams",
    ("pytorch/run_ut/call.py", "msprobe.pytorch.hooks.api_names"):
        "the API table imports torch's Dynamo: built at the first replay, not at import (docs/scale.md)",
    ("pytorch/run_ut/command.py", "msprobe.pytorch.run_ut.inputs"): COMMAND,
    ("pytorch/run_ut/command.py", "msprobe.pytorch.run_ut.replay"): COMMAND,
    ("pytorch/run_ut/multi.py", "msprobe.pytorch.run_ut.inputs"): COMMAND,
    ("pytorch/run_ut/multi.py", "msprobe.pytorch.run_ut.replay"): COMMAND,
    ("mindspore/cli.py", "msprobe.mindspore.compare"): COMMAND,
    ("mindspore/run_ut/command.py", "msprobe.mindspore.run_ut.replay"): COMMAND,
    ("mindspore/kit.py", "msprobe.mindspore.graph_dump"): "the static-graph kernel dump loads at level L2 only",
    ("mindspore/graph_dump/session.py", "msprobe.mindspore.private_api"):
        "MindSpore's private executor is reached only when a static-graph step ends",
    ("mindspore/run_ut/replay.py", "msprobe.mindspore.hooks.catalog"):
        "the catalog walks every MindSpore API namespace: read at the first replay",
    ("mindspore/run_ut/replay.py", "msprobe.mindspore.run_ut.torch_bench"):
        "torch is the optional extra msprobe-mindspore[run_ut]: imported only when the bench is PyTorch",
    ("core/cli.py", "msprobe.core.anomaly.command"): "anomaly origin loads when its command runs",
    ("core/cli.py", "msprobe.core.monitor.view"): "the monitor's view page loads when `msprobe monitor view` runs",
    ("core/monitor/writers.py", "msprobe.core.monitor.tensorboard"):
        "tensorboard is the optional extra monitor-tb: imported only when \"format\" asks for it",
    ("pytorch/cli.py", "msprobe.pytorch.config_check"): COMMAND + " (config_check imports torch)",
    ("mindspore/cli.py", "msprobe.mindspore.config_check"): COMMAND + " (config_check imports mindspore)",
    ("pytorch/monitor/trainer_mon.py", "msprobe.pytorch.debugger"):
        "alert.dump arms the debugger only when an alert fires: a monitor without it never loads the dump wing",
}


def _local_imports() -> set[tuple[str, str]]:
    found = set()
    for path in PACKAGES.glob("*/src/msprobe/**/*.py"):
        where = "/".join(path.relative_to(PACKAGES).parts[3:])  # msprobe-x/src/msprobe/<where>
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("msprobe"):
                    found.add((where, inner.module))
                elif isinstance(inner, ast.Import):
                    found |= {(where, a.name) for a in inner.names if a.name.startswith("msprobe")}
    return found


def test_every_function_local_import_of_msprobe_is_listed_with_its_reason():
    found = _local_imports()
    assert sorted(found - LOCAL.keys()) == [], "unlisted function-local imports: add each with its reason"
    assert sorted(LOCAL.keys() - found) == [], "listed but gone: remove them from the table"
    assert all(reason.strip() for reason in LOCAL.values())
