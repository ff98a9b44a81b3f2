"""stack.json shows the user's frames (not msprobe's, not torch's TorchFunctionMode dispatch), and
``torch.compile`` trains with the debugger on: msprobe stays out of Dynamo's trace (no recompiles), and
every API inside the compiled function is recorded as in eager mode, with the eager numbers."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import msprobe.core
import msprobe.pytorch
from msprobe.pytorch import PrecisionDebugger

USER_SCRIPT = '''
import torch
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger


def main(dump_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=dump_path, step=[0])
    debugger.start(model)
    y = model(torch.randn(2, 4))
    z = 1 - y  # Tensor.__rsub__: torch's Python wrapper hands it on through handle_torch_function
    F.softmax(z, dim=-1)
    debugger.stop()
    debugger.finish()
'''


def test_stack_json_keeps_user_frames_under_a_msprobe_folder_and_drops_dispatch_frames(tmp_path):
    script = tmp_path / "msprobe" / "pytorch" / "train.py"  # what the old path-text filter dropped
    script.parent.mkdir(parents=True)
    script.write_text(USER_SCRIPT)
    spec = importlib.util.spec_from_file_location("user_train_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "dump"))

    stack = json.loads((tmp_path / "dump" / "step0" / "rank" / "stack.json").read_text())
    assert {"Functional.linear.0.forward", "Tensor.__rsub__.0.forward", "Functional.softmax.0.forward"} <= set(stack)
    own_dirs = [*msprobe.core.__path__, *msprobe.pytorch.__path__]
    overrides = os.path.abspath(torch.overrides.__file__)
    for name, frames in stack.items():
        assert any(frame.startswith(f"File {script}, line ") for frame in frames), name
        assert not any(frame.startswith(f"File {d}") for d in own_dirs for frame in frames), name
        assert not any(frame.startswith(f"File {overrides},") for frame in frames), name
    # __rsub__ did go through torch's Python dispatch (its wrapper frame is there, the handler's is not)
    assert any(f"{os.sep}torch{os.sep}_tensor.py" in frame for frame in stack["Tensor.__rsub__.0.forward"])


class Net(nn.Module):
    """Operators (``+``, ``*``) go through msprobe's dunder wrappers; ``torch.relu`` and ``F.linear``
    through its TorchFunctionMode."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x) + 1.0
        return self.b(torch.relu(h) * 2)


STEPS = 10  # more than Dynamo's recompile_limit (8)


def _train(dump_path: Path | None, *, backend: str | None, level: str = "L1", steps: list[int] | None = None):
    """Losses and final parameters of STEPS training steps, with the debugger when ``dump_path`` is given."""
    torch.manual_seed(0)
    model = Net()
    run = torch.compile(model, backend=backend) if backend else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    debugger = None
    if dump_path is not None:
        debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(dump_path),
                                     step=list(range(STEPS)) if steps is None else steps)
    losses = []
    data = torch.randn(STEPS, 4, 8, generator=torch.Generator().manual_seed(1))
    for x in data:
        if debugger is not None:
            debugger.start(model)
        loss = run(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
        if debugger is not None:
            debugger.stop()
            debugger.step()
    if debugger is not None:
        debugger.finish()
    return torch.stack(losses), [p.detach().clone() for p in model.parameters()]


class _DynamoLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def dynamo_log():
    """Warnings of torch._dynamo (recompile_limit is logged there) and any Python warning it issues."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    handler = _DynamoLog()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield handler
    logger.removeHandler(handler)
    handler.messages += [str(w.message) for w in caught if "_dynamo" in w.filename or "dynamo" in str(w.message)]
    torch._dynamo.reset()


def _entries(dump_path: Path, step: int) -> dict:
    return json.loads((dump_path / f"step{step}" / "rank" / "dump.json").read_text())["data"]


@pytest.mark.parametrize("level, backend", [
    ("L1", "eager"), ("L1", "aot_eager"), ("mix", "eager"), ("mix", "aot_eager"), ("L0", "eager"), ("L0", "aot_eager"),
])
def test_compiled_training_with_the_debugger_is_recorded_as_eager_without_recompiles(
        tmp_path, dynamo_log, level, backend):
    losses, params = _train(tmp_path / "compiled", backend=backend, level=level)
    eager_losses, eager_params = _train(None, backend=None)
    _train(tmp_path / "eager", backend=None, level=level)

    assert [m for m in dynamo_log.messages if "recompile" in m] == []
    # every call in the compiled function ran (and was recorded) eagerly: the numbers are eager's, bit for bit
    assert torch.isfinite(losses).all() and torch.equal(losses, eager_losses)
    assert all(torch.equal(p, q) for p, q in zip(params, eager_params))
    for step in (0, STEPS - 1):
        compiled, eager = _entries(tmp_path / "compiled", step), _entries(tmp_path / "eager", step)
        assert list(compiled) == list(eager)
        assert compiled == eager
    if level in ("L1", "mix"):
        assert {"Functional.linear.0.forward", "Tensor.__add__.0.forward", "Torch.relu.0.forward",
                "Tensor.__mul__.0.forward", "Functional.linear.1.forward"} <= set(compiled)
    if level in ("L0", "mix"):
        assert {"Module.a.Linear.forward.0", "Module.b.Linear.backward.0"} <= set(compiled)


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_steps_without_the_debugger_run_the_compiled_graph(tmp_path, dynamo_log, level):
    """Collecting every other step: the compiled graph serves the others, and switching does not pile up
    recompilations. Module hooks added after the first compilation are seen only when Dynamo guards on
    them (it does not by default: docs/pytorch/dump.md)."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=level == "L1"):
        _train(tmp_path, backend="eager", level=level, steps=[1, 3, 5, 7, 9])
    assert [m for m in dynamo_log.messages if "recompile" in m] == []
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    assert ("Tensor.__add__.0.forward" if level == "L1" else "Module.b.Linear.forward.0") in _entries(tmp_path, 9)
    assert not (tmp_path / "step0").exists()
