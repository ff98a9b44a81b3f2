"""Level L2 on PyTorch: the aten-level dump of one API off the NPU, and the NPU kernel dump's contract
with torch_npu (through a recording backend; what only a real NPU shows is in docs/pytorch/kernel_dump.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import tensor_records
from torch import nn
from torch_models import ConvBN, train

from msprobe.core.config import load_debugger_config
from msprobe.core.config.errors import ConfigError
from msprobe.core.lifecycle.naming import parse_name
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.compare import compare
from msprobe.pytorch.kernel_dump import DUMPED, UNSUPPORTED, KernelDumpBackend, kernel_dump
from msprobe.pytorch.kit import TorchKit


def write_config(tmp_path: Path, api: str, task: str = "tensor", name: str = "config.json", **extra) -> str:
    config = {"task": task, "dump_path": str(tmp_path / "dump"), "level": "L2", "rank": [], "step": [],
              task: {"list": [api], **extra}}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def read(root: Path, name: str, step: int = 0) -> dict:
    return json.loads((root / f"step{step}" / "rank" / name).read_text())


def one_step(debugger, model, x, y, autocast: torch.dtype | None = None) -> None:
    debugger.start(model)
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    debugger.stop()
    debugger.step()


def cnn_batch():
    torch.manual_seed(0)
    model = ConvBN()
    gen = torch.Generator().manual_seed(1)
    x, y = ConvBN.batch(gen)
    return model, x, y


def check_against_saved(root: Path, entry: dict) -> int:
    checked = 0
    for leaf in tensor_records(entry):
        saved = torch.load(root / "step0" / "rank" / "dump_tensor_data" / leaf["data_name"], weights_only=True)
        values = saved.detach().numpy().astype(np.float64)
        assert leaf["dtype"] == str(saved.dtype) and leaf["shape"] == list(saved.shape)
        if values.size == 0 or saved.dtype == torch.bool:
            continue
        expected = {"Max": values.max(), "Min": values.min(), "Mean": values.mean(),
                    "Norm": np.sqrt((values ** 2).sum())}
        for key, want in expected.items():
            assert leaf[key] == pytest.approx(want, rel=1e-5, abs=1e-6), (leaf["data_name"], key)
        checked += 1
    return checked


@pytest.mark.parametrize("api, first_aten", [
    ("Functional.linear.0.forward", "Aten.addmm.default.0.forward"),
    ("Functional.conv2d.0.backward", "Aten.convolution_backward.default.0.backward"),
])
def test_aten_entries_nest_under_the_api_and_match_the_saved_tensors(tmp_path, api, first_aten):
    model, x, y = cnn_batch()
    one_step(PrecisionDebugger(config_path=write_config(tmp_path, api)), model, x, y)
    root = tmp_path / "dump"
    dump, construct, stack = read(root, "dump.json"), read(root, "construct.json"), read(root, "stack.json")
    assert dump["level"] == "L2" and dump["task"] == "tensor"
    names = list(dump["data"])
    aten = [n for n in names if n.startswith("Aten.")]
    assert first_aten in aten and names[-1] == api  # the API's entry after the operators inside it
    assert set(names) == {*aten, api}
    direction = parse_name(api).direction
    for name in aten:
        entry = parse_name(name)
        assert entry.prefix == "Aten" and entry.direction == direction
        assert construct[name] == api
        assert set(dump["data"][name]) == {"input_args", "input_kwargs", "output"}
        assert name in stack
    assert construct[api] is None
    checked = sum(check_against_saved(root, dump["data"][name]) for name in names)
    assert checked >= 4
    assert not any(parse_name(n).api.split(".")[0] in ("detach", "empty") for n in aten)


def test_linear_backward_covers_every_operator_of_its_backward(tmp_path):
    model, x, y = cnn_batch()
    one_step(PrecisionDebugger(config_path=write_config(tmp_path, "Functional.linear.0.backward",
                                                        task="statistics")), model, x, y)
    dump = read(tmp_path / "dump", "dump.json")["data"]
    ops = {parse_name(n).api for n in dump if n.startswith("Aten.")}
    assert {"mm.default", "sum.dim_IntList"} <= ops  # grad of input and weight, grad of bias
    grads = dump["Functional.linear.0.backward"]
    assert grads["input"][0]["shape"] == [4, 5]


def _no_dropout(model_cls):
    class NoDropout(model_cls):
        def __init__(self) -> None:
            super().__init__()
            for module in self.modules():
                if isinstance(module, nn.Dropout):
                    module.p = 0.0

    return NoDropout


@pytest.mark.parametrize("api", ["Functional.conv2d.0.backward", "Functional.linear.0.forward"])
def test_training_is_bit_identical_with_l2(tmp_path, api):
    reference = train(_no_dropout(ConvBN), steps=2)  # dumping sets dropout to 0 (docs/pytorch/dump.md#dropout)
    debugger = PrecisionDebugger(config_path=write_config(tmp_path, api))
    observed = train(ConvBN, debugger, steps=2)
    for expected, actual in zip(reference, observed):
        assert len(expected) == len(actual)
        for a, b in zip(expected, actual):
            assert torch.equal(a, b)
    for step in (0, 1):
        assert api in read(tmp_path / "dump", "dump.json", step)["data"]


def test_fp32_and_bf16_l2_dumps_compare_at_aten_level(tmp_path):
    model, x, y = cnn_batch()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for side, autocast in (("fp32", None), ("bf16", torch.bfloat16)):
        model.load_state_dict(state)
        model.zero_grad()
        (tmp_path / side).mkdir()
        config = write_config(tmp_path / side, "Functional.linear.0.backward")
        one_step(PrecisionDebugger(config_path=config), model, x, y, autocast=autocast)
    bf16 = read(tmp_path / "bf16" / "dump", "dump.json")["data"]
    assert any(leaf["dtype"] == "torch.bfloat16" for leaf in tensor_records(bf16))
    result = compare({"npu_path": str(tmp_path / "bf16/dump/step0/rank/dump.json"),
                      "bench_path": str(tmp_path / "fp32/dump/step0/rank/dump.json")}, tmp_path / "out", workers=1)
    assert result.mode == "tensor"
    matched = [r for r in result.results if r.npu is not None and r.bench is not None]
    aten = {r.npu.name.split(".input")[0].split(".output")[0] for r in matched if r.npu.name.startswith("Aten.")}
    assert any(name.startswith("Aten.mm.default.") for name in aten)
    assert any(r.npu.name.startswith("Functional.linear.0.backward") for r in matched)
    cosines = [r.tensor.cosine for r in matched if r.tensor is not None and r.tensor.cosine is not None]
    assert cosines and min(cosines) > 0.99


def test_l2_needs_exactly_one_api_and_says_why(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "level": "L2"}))
    with pytest.raises(ConfigError, match="aten operators elsewhere"):
        PrecisionDebugger(config_path=str(path))


def test_backward_without_a_graph_is_reported(tmp_path, msprobe_log):
    model, x, y = cnn_batch()
    debugger = PrecisionDebugger(config_path=write_config(tmp_path, "Functional.linear.0.backward"))
    debugger.start(model)
    with torch.no_grad():
        model(x)
    debugger.stop()
    debugger.step()
    assert "no backward operators" in msprobe_log.text()


# ---------------------------------------------------------------------------------- the NPU path
class RecordingBackend(KernelDumpBackend):
    """Stands in for torch_npu: records the calls and, like the ACL dump, writes one file per operator
    run while the dump is on into ``{dump_path}/{timestamp}/{device}/`` of the configuration."""

    def __init__(self, device: int = 3) -> None:
        self.device = device
        self.calls: list[tuple] = []
        self._config: dict | None = None

    def device_id(self) -> int:
        return self.device

    def init_dump(self) -> None:
        self.calls.append(("init_dump",))

    def set_dump(self, config_path: str) -> None:
        self._config = json.loads(Path(config_path).read_text())
        node = torch._C._current_autograd_node()
        self.calls.append(("set_dump", config_path, None if node is None else node.name()))

    def finalize_dump(self) -> None:
        self.calls.append(("finalize_dump",))
        out = Path(self._config["dump"]["dump_path"]) / "20261201103000" / str(self.device)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"Op.kernel.{len(self.calls)}.0.0").write_bytes(b"")


def npu_run(tmp_path: Path, api: str, backend: RecordingBackend, steps: int = 2, grad: bool = True):
    config = load_debugger_config(write_config(tmp_path, api, task="statistics"), framework="pytorch")
    finished = []
    runner = kernel_dump(config, TorchKit(), lambda: finished.append(True), backend=backend)
    model, x, y = cnn_batch()
    for _ in range(steps):
        runner.start(model)
        with torch.set_grad_enabled(grad):
            loss = nn.functional.cross_entropy(model(x), y)
        if grad:
            loss.backward()
        runner.stop()
        runner.step()
    runner.finish()
    return finished


@pytest.mark.parametrize("api, in_backward", [("Functional.linear.0.forward", False),
                                              ("Functional.linear.0.backward", True)])
def test_npu_kernel_dump_contract(tmp_path, msprobe_log, api, in_backward):
    backend = RecordingBackend()
    assert npu_run(tmp_path, api, backend) == [True]
    names = [c[0] for c in backend.calls]
    assert names == ["init_dump", "set_dump", "finalize_dump"] * 2  # one API per step
    for step, call in enumerate(c for c in backend.calls if c[0] == "set_dump"):
        step_dir = tmp_path / "dump" / f"step{step}"
        assert call[1] == str(step_dir / "kernel_config_3.json")
        assert json.loads(Path(call[1]).read_text()) == {"dump": {
            "dump_list": [], "dump_path": str(step_dir), "dump_mode": "all", "dump_op_switch": "on"}}
        assert (call[2] is not None) == in_backward  # the dump is on inside the API's backward nodes only
        if in_backward:
            assert call[2] in ("AddmmBackward0", "TBackward0")
        assert len(list((step_dir / "20261201103000" / "3").iterdir())) == 1
        assert not (step_dir / "rank").exists()
    assert msprobe_log.text().count(DUMPED.format(api_name=api)) == 2


def test_npu_kernel_dump_of_a_backward_without_graph_is_unsupported(tmp_path, msprobe_log):
    backend = RecordingBackend()
    npu_run(tmp_path, "Functional.linear.0.backward", backend, steps=1, grad=False)
    assert [c[0] for c in backend.calls] == []
    assert UNSUPPORTED.format(api_name="Functional.linear.0.backward") in msprobe_log.text()


def test_npu_dump_mode_follows_data_mode(tmp_path):
    backend = RecordingBackend()
    config = load_debugger_config(write_config(tmp_path, "Functional.linear.0.forward", task="statistics",
                                               data_mode=["input"]), framework="pytorch")
    runner = kernel_dump(config, TorchKit(), lambda: None, backend=backend)
    runner.start(None)
    nn.functional.linear(torch.randn(2, 3), torch.randn(4, 3))
    runner.stop()
    config_file = tmp_path / "dump" / "step0" / "kernel_config_3.json"
    assert json.loads(config_file.read_text())["dump"]["dump_mode"] == "input"


def test_the_docs_example_runs(tmp_path):
    import re
    import subprocess
    import sys

    doc = Path(__file__).resolve().parents[2] / "docs" / "pytorch" / "kernel_dump.md"
    code = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split()[0] for line in result.stdout.splitlines()]
    assert "Aten.mm.default.0.backward.output.0" in rows and rows[-1].startswith("Functional.linear.0.backward")
    assert any(p.suffix == ".xlsx" for p in (tmp_path / "compare_out").iterdir())
