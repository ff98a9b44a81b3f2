"""Training never fails because msprobe is on: a tensor msprobe cannot read is logged once, the call is
left out, and the step (and the rest of its dump) goes on. The case here is a real one: a model built
on the meta device (deferred initialisation, as FSDP2 users do) while the debugger collects."""

from __future__ import annotations

import json

import pytest
import torch

from msprobe.pytorch import PrecisionDebugger


def _step_with_a_meta_model(debugger: PrecisionDebugger) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    debugger.start()
    with torch.device("meta"):
        deferred = torch.nn.Linear(4, 4)  # its initialisation runs on tensors without data
    y = model(x).sum()
    y.backward()
    debugger.stop()
    debugger.step()
    assert deferred.weight.is_meta
    return model.weight.grad


def _data(root) -> dict:
    return json.loads(next(root.rglob("dump.json")).read_text())["data"]


def test_meta_tensors_are_recorded_without_statistics(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L1")
    _step_with_a_meta_model(debugger)
    data = _data(tmp_path / "dump")
    meta = [entry for name, entry in data.items() if name.startswith("Torch.empty.")]
    assert meta
    for entry in meta:
        assert entry["output"][0]["Max"] is None and entry["output"][0]["Norm"] is None  # as msprobe 1.1.1
    assert data["Functional.linear.0.forward"]["output"][0]["Max"] is not None


@pytest.mark.parametrize("task,extra", [("tensor", {}), ("statistics", {"statistics": {"summary_mode": "md5"}})])
def test_a_call_msprobe_cannot_record_is_left_out_and_logged_once(tmp_path, msprobe_log, task, extra):
    reference = _step_with_a_meta_model(PrecisionDebugger(dump_path=str(tmp_path / "plain"), task="statistics",
                                                          level="L1", step=[0]))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": task, "level": "L1", "dump_path": str(tmp_path / "dump"), **extra}))
    grad = _step_with_a_meta_model(PrecisionDebugger(config_path=str(config)))
    assert torch.equal(grad, reference)  # the step went on, with the same numbers
    data = _data(tmp_path / "dump")
    assert "Functional.linear.0.forward" in data and "Functional.linear.0.backward" in data
    assert not any(name.startswith("Torch.empty.") for name in data)  # left out: no data to save or hash
    errors = [m for m in msprobe_log.messages if "could not record" in m]
    assert len(errors) == 1 and "Torch.empty.0.forward" in errors[0]


class Wrapped(torch.Tensor):
    """A wrapper subclass (as quantised or sharded tensors are): its memory is not its values."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        unwrap = lambda t: t.inner if isinstance(t, Wrapped) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: Wrapped(t) if isinstance(t, torch.Tensor) else t, out)


@pytest.mark.parametrize("task,extra", [("statistics", {}), ("tensor", {}),
                                        ("statistics", {"statistics": {"summary_mode": "md5"}})])
def test_a_wrapper_subclass_is_recorded_with_its_values(tmp_path, task, extra):
    import zlib

    import numpy as np

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": task, "level": "L1", "dump_path": str(tmp_path / "dump"), **extra}))
    debugger = PrecisionDebugger(config_path=str(config))
    inner = torch.randn(5, generator=torch.Generator().manual_seed(3))
    debugger.start()
    torch.mul(Wrapped(inner), 2.0)
    debugger.stop()
    debugger.step()
    record = _data(tmp_path / "dump")["Torch.mul.0.forward"]["input_args"][0]
    values = inner.double().numpy()
    assert record["Max"] == pytest.approx(values.max(), rel=1e-7)
    assert record["Norm"] == pytest.approx(np.linalg.norm(values), rel=1e-6)
    if "md5" in str(extra):
        assert record["md5"] == f"{zlib.crc32(inner.numpy().tobytes()):08x}"
    if task == "tensor":
        saved = torch.load(next((tmp_path / "dump").rglob(record["data_name"])))
        assert type(saved) is torch.Tensor and torch.equal(saved, inner)
