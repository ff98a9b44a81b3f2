"""End-to-end PyTorch dumps: real training, real hooks, real files, numbers checked with numpy."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch_models import ConvBN, train

import msprobe.core
import msprobe.pytorch
from msprobe.core.lifecycle.naming import parse_name
from msprobe.pytorch import PrecisionDebugger


def load(dump_root: Path, step: int = 0, name: str = "dump.json"):
    return json.loads((dump_root / f"step{step}" / "rank" / name).read_text())


def reference_stats(array: np.ndarray) -> dict:
    values = array.astype(np.float64)
    return {"Max": values.max(), "Min": values.min(), "Mean": values.mean(), "Norm": np.sqrt((values**2).sum())}


def assert_stats(record: dict, array: np.ndarray) -> None:
    expected = reference_stats(array)
    for key, value in expected.items():
        assert record[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def config_file(tmp_path: Path, **sections) -> str:
    config = {"dump_path": str(tmp_path / "dump"), "rank": [], "step": [], **sections}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def one_step(debugger, model, x, y):
    debugger.start(model)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    debugger.stop()
    debugger.step()
    return loss


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x = torch.randn(4, 6)
    y = torch.tensor([0, 2, 1, 0])
    return model, x, y


def test_l1_statistics_match_numpy_and_names_follow_the_grammar(tmp_path, tiny):
    model, x, y = tiny
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    one_step(debugger, model, x, y)
    dump = load(tmp_path / "dump")
    assert dump["task"] == "statistics" and dump["level"] == "L1" and dump["dump_data_dir"] is None
    data = dump["data"]
    names = list(data)
    assert names[0] == "Functional.linear.0.forward"
    assert "Functional.linear.1.forward" in names and "Functional.relu.0.forward" in names
    assert "Functional.linear.0.backward" in names
    for name in names:
        parse_name(name)
    first = data["Functional.linear.0.forward"]
    assert_stats(first["input_args"][0], x.numpy())
    assert_stats(first["input_args"][1], model[0].weight.detach().numpy())
    assert first["input_args"][0]["dtype"] == "torch.float32"
    assert first["input_args"][0]["shape"] == [4, 6]
    assert first["input_args"][1]["requires_grad"] is True
    expected_out = (x @ model[0].weight.T + model[0].bias).detach().numpy()
    assert_stats(first["output"][0], expected_out)
    # backward: input = grad of the output, output = grads of (input, weight, bias) in argument order
    backward = data["Functional.linear.0.backward"]
    assert backward["output"][0] is None  # x needs no grad
    assert_stats(backward["output"][1], model[0].weight.grad.numpy())
    assert_stats(backward["output"][2], model[0].bias.grad.numpy())
    assert load(tmp_path / "dump", name="construct.json") == {}
    stack = load(tmp_path / "dump", name="stack.json")
    assert "Functional.linear.0.forward" in stack
    assert any("test_dump.py" in frame for frame in stack["Functional.linear.0.forward"])
    # no frame of msprobe itself, told by where its packages are installed (not by a path's text: the
    # repository may sit in a folder named msprobe, and so may a user's own code)
    own = [*msprobe.core.__path__, *msprobe.pytorch.__path__]
    assert not any(frame.startswith(f"File {d}") for d in own for frames in stack.values() for frame in frames)


def test_mix_writes_modules_and_apis_with_parents(tmp_path, tiny):
    model, x, y = tiny
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="mix", model=model)
    one_step(debugger, model, x, y)
    data = load(tmp_path / "dump")["data"]
    construct = load(tmp_path / "dump", name="construct.json")
    assert "Module.0.Linear.forward.0" in data and "Module.2.Linear.forward.0" in data
    assert "Module.0.Linear.backward.0" in data
    assert construct["Functional.linear.0.forward"] == "Module.0.Linear.forward.0"
    assert construct["Functional.linear.1.forward"] == "Module.2.Linear.forward.0"
    assert construct["Functional.linear.0.backward"] == "Module.0.Linear.backward.0"
    assert construct["Module.0.Linear.forward.0"] is None
    module_out = data["Module.0.Linear.forward.0"]["output"][0]
    assert module_out == data["Functional.linear.0.forward"]["output"][0]


def test_l0_needs_the_model(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L0")
    with pytest.raises(ValueError, match="needs the model"):
        debugger.start()


def test_tensor_task_saves_loadable_pt_files(tmp_path, tiny):
    model, x, y = tiny
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="tensor", level="L1")
    one_step(debugger, model, x, y)
    dump = load(tmp_path / "dump")
    tensor_dir = Path(dump["dump_data_dir"])
    assert tensor_dir.is_absolute() and tensor_dir.is_dir()
    record = dump["data"]["Functional.linear.0.forward"]["input_args"][0]
    assert record["data_name"] == "Functional.linear.0.forward.input.0.pt"
    saved = torch.load(tensor_dir / record["data_name"], weights_only=True)
    assert torch.equal(saved, x)
    for path in tensor_dir.iterdir():
        tensor = torch.load(path, weights_only=True)
        assert tensor.is_contiguous() and tensor.device.type == "cpu"
    assert oct(tensor_dir.stat().st_mode & 0o777) == oct(0o750)
    assert oct((tensor_dir.parent / "dump.json").stat().st_mode & 0o777) == oct(0o640)


def test_md5_is_crc32_of_the_bytes(tmp_path, tiny):
    model, x, y = tiny
    path = config_file(tmp_path, task="statistics", level="L1", statistics={"summary_mode": "md5"})
    one_step(PrecisionDebugger(config_path=path), model, x, y)
    record = load(tmp_path / "dump")["data"]["Functional.linear.0.forward"]["input_args"][0]
    assert record["md5"] == f"{zlib.crc32(x.numpy().tobytes()):08x}"


def test_inplace_api_records_its_input_before_mutation(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    x = torch.ones(3)
    debugger.start()
    x.add_(2)
    debugger.stop()
    entry = load(tmp_path / "dump")["data"]["Tensor.add_.0.forward"]
    assert entry["input_args"][0]["Max"] == 1.0
    assert entry["output"][0]["Max"] == 3.0
    assert torch.equal(x, torch.full((3,), 3.0))


def test_steps_filter_and_finish_removes_hooks(tmp_path, msprobe_log):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="mix", step=[1])
    train(ConvBN, debugger, steps=3)
    dumps = sorted(p.relative_to(tmp_path / "dump").as_posix() for p in (tmp_path / "dump").rglob("dump.json"))
    assert dumps == ["step1/rank/dump.json"]
    assert "finished" in msprobe_log.text()
    assert "dropout probability set to 0" in msprobe_log.text()
    assert torch.nn.functional.gelu is torch.nn.functional.gelu


def test_list_and_data_mode_filters(tmp_path, tiny):
    model, x, y = tiny
    path = config_file(
        tmp_path, task="statistics", level="L1",
        statistics={"list": ["relu"], "data_mode": ["forward", "input"]},
    )
    one_step(PrecisionDebugger(config_path=path), model, x, y)
    data = load(tmp_path / "dump")["data"]
    assert list(data) == ["Functional.relu.0.forward"]
    assert set(data["Functional.relu.0.forward"]) == {"input_args", "input_kwargs"}


def test_rerunning_into_the_same_dump_path_moves_the_old_step_aside(tmp_path, tiny, msprobe_log):
    model, x, y = tiny
    old = tmp_path / "dump" / "step0" / "rank"
    old.mkdir(parents=True)
    (old / "dump.json").write_text('{"from": "an earlier run"}')
    one_step(PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1"), model, x, y)
    moved = [p for p in (tmp_path / "dump" / "step0").iterdir() if p.name.startswith("rank.moved-")]
    assert len(moved) == 1 and json.loads((moved[0] / "dump.json").read_text()) == {"from": "an earlier run"}
    assert "Functional.linear.0.forward" in load(tmp_path / "dump")["data"]
    assert "moved" in msprobe_log.text()


def test_module_dump_collects_the_module_as_one_unit(tmp_path):
    from msprobe.pytorch import module_dump, module_dump_end

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(10, 8)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    debugger.start()
    before = torch.tanh(x)
    module_dump(block, "MyModuleOP")
    out = block(before)
    module_dump_end()
    out.sum().backward()
    debugger.stop()
    data = load(tmp_path / "dump")["data"]
    assert "Torch.tanh.0.forward" in data and "Tensor.sum.0.forward" in data
    assert "Module.MyModuleOP.Sequential.forward.0" in data
    assert "Module.MyModuleOP.Sequential.backward.0" in data
    assert not any(name.startswith(("Functional.linear", "Functional.relu")) for name in data)
    entry = data["Module.MyModuleOP.Sequential.forward.0"]
    assert_stats(entry["input_args"][0], torch.tanh(x).numpy())
    assert_stats(entry["output"][0], out.detach().numpy())
    grads = data["Module.MyModuleOP.Sequential.backward.0"]
    assert_stats(grads["input"][0], np.ones((10, 2), np.float32))


def test_enable_dataloader_drives_the_steps_and_is_deprecated(tmp_path, msprobe_log):
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original_next = _BaseDataLoaderIter.__next__
    path = config_file(tmp_path, task="statistics", level="L1", step=[0, 1], enable_dataloader=True)
    debugger = PrecisionDebugger(config_path=path)
    assert "deprecated" in msprobe_log.text()
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=2)
    for (batch,) in loader:  # no start/stop/step calls in the loop
        model(batch).sum().backward()
    dumps = sorted(p.parent.parent.name for p in (tmp_path / "dump").rglob("dump.json"))
    assert dumps == ["step0", "step1"]
    assert "Functional.linear.0.forward" in load(tmp_path / "dump", step=1)["data"]
    assert debugger.finished
    assert _BaseDataLoaderIter.__next__ is original_next


def test_module_dump_as_a_with_block(tmp_path):
    from msprobe.pytorch import module_dump
    block = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    debugger.start()
    with module_dump(block, "blk"):
        out = block(torch.randn(3, 8))
    torch.relu(out)  # after the block: APIs are collected again
    debugger.stop()
    data = load(tmp_path / "dump")["data"]
    assert "Module.blk.Sequential.forward.0" in data and "Torch.relu.0.forward" in data
    assert not any(name.startswith("Functional.linear") for name in data)


REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-outputs" / "pytorch"  # msprobe 1.1.1's


def test_memory_format_generator_layout_and_reduce_op_are_written_as_1_1_1_writes_them(tmp_path, msprobe_log):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    x = torch.ones(3)
    generator = torch.Generator().manual_seed(0)
    debugger.start()
    torch.ones_like(x, memory_format=torch.preserve_format)
    torch.rand(2, generator=generator)
    torch.empty(2, layout=torch.strided)
    torch.zeros(2).to(memory_format=torch.contiguous_format)
    debugger.stop()
    data = load(tmp_path / "dump")["data"]
    kwargs = data["Torch.ones_like.0.forward"]["input_kwargs"]
    assert kwargs["memory_format"] == {"type": "torch.memory_format", "format": "preserve_format"}
    assert data["Tensor.to.0.forward"]["input_kwargs"]["memory_format"]["format"] == "contiguous_format"
    assert data["Torch.rand.0.forward"]["input_kwargs"]["generator"] is None
    assert data["Torch.empty.0.forward"]["input_kwargs"]["layout"] is None
    assert "cannot show" not in msprobe_log.text()
    reference = REFERENCE / "pt_statistics_L1_fp32" / "step0" / "rank" / "dump.json"
    expected = json.loads(reference.read_text())["data"]["Torch.ones_like.0.forward"]["input_kwargs"]
    assert kwargs == expected  # the member msprobe 1.1.1 wrote for the same call
