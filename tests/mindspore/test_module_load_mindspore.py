"""Module input replay, config key ``load`` (docs/config.md#load), on MindSpore PyNative with the LLaMA port of
``zoo_ms.py``: a clean fp32 tensor dump, then a run with a weight of ``model.layers.0`` scaled, where ``load``
feeds ``model.layers.1`` the clean run's inputs (hidden states, the mask and the (cos, sin) tuple) — its output
is the clean run's again, in our own hook and in the run's dump; a shape mismatch is one line; a training step
loading its own inputs keeps its loss and the gradients from the loaded cell on bit for bit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import step_data, write_config  # noqa: E402
from zoo_ms import ZOO, build, cell  # noqa: E402

from msprobe.core.config import ConfigError  # noqa: E402
from msprobe.core.dump.input_replay import LoadMismatch  # noqa: E402
from msprobe.mindspore import PrecisionDebugger  # noqa: E402

LLAMA = next(spec for spec in ZOO if spec.name == "llama")
LAYER = "Cell.model.layers.1.LlamaDecoderLayer.forward.0"
FAULT = "model.layers.0.mlp.down_proj"


def _model(fault: bool = False) -> ms.nn.Cell:
    model = build(LLAMA)
    if fault:
        weight = cell(model, FAULT).weight
        weight.set_data(weight * 1.05)  # upstream of layers.1: its inputs change
    return model


def _ids(length: int = 12) -> ms.Tensor:
    return ms.Tensor(np.random.default_rng(1).integers(0, 96, (2, length)).astype(np.int32))


def _run(model: ms.nn.Cell, debugger: PrecisionDebugger | None, ids: ms.Tensor) -> dict[str, np.ndarray]:
    """One forward; the outputs of both decoder layers as float64 numpy, seen by our own forward hooks."""
    seen: dict[str, np.ndarray] = {}
    hooks = [cell(model, f"model.layers.{i}").register_forward_hook(
        lambda _c, _a, out, i=i: seen.__setitem__(f"l{i}", out.asnumpy().astype(np.float64))) for i in (0, 1)]
    try:
        if debugger is not None:
            debugger.start(model)
        model(ids)
        if debugger is not None:
            debugger.stop()
            debugger.step()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _load_config(tmp_path: Path, name: str, load: dict, task: str = "statistics") -> str:
    return str(write_config(tmp_path, name, task, "L0", {}, load=load))


def _output_array(dump_path: Path) -> np.ndarray:
    record = step_data(dump_path, 0)[LAYER]["output"][0]
    return np.load(dump_path / "step0" / "rank" / "dump_tensor_data" / record["data_name"]).astype(np.float64)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    base = tmp_path_factory.mktemp("load_ms")
    debugger = PrecisionDebugger(config_path=str(write_config(base, "clean", "tensor", "L0", {})))
    outputs = _run(_model(), debugger, _ids())
    debugger.finish()
    return base / "clean", outputs


def test_loaded_cell_computes_the_clean_output(clean, tmp_path):
    source, expected = clean
    assert np.array_equal(_output_array(source), expected["l1"])  # the dump saved what the cell returned
    bare = _run(_model(fault=True), None, _ids())
    assert not np.array_equal(bare["l1"], expected["l1"])  # the upstream fault reaches layers.1 without load

    debugger = PrecisionDebugger(config_path=_load_config(tmp_path, "load", {"path": str(source), "modules": [LAYER]}))
    observed = _run(_model(fault=True), debugger, _ids())
    debugger.finish()
    assert not np.array_equal(observed["l0"], expected["l0"])  # layers.0 itself still runs faulted
    assert np.array_equal(observed["l1"], expected["l1"])  # layers.1 on the recorded inputs: the clean output
    assert not (tmp_path / "load" / "step0").exists()  # dump_after_load defaults to false: nothing dumped


def test_dump_after_load_records_the_clean_output(clean, tmp_path):
    source, expected = clean
    load = {"path": str(source), "modules": [LAYER], "dump_after_load": True}
    debugger = PrecisionDebugger(config_path=_load_config(tmp_path, "after", load, task="tensor"))
    _run(_model(fault=True), debugger, _ids())
    debugger.finish()
    assert np.array_equal(_output_array(tmp_path / "after"), _output_array(source))
    assert np.array_equal(_output_array(tmp_path / "after"), expected["l1"])
    recorded = json.loads((source / "step0" / "rank" / "dump.json").read_text())["data"][LAYER]["input_args"][0]
    dumped = step_data(tmp_path / "after", 0)[LAYER]["input_args"][0]
    hidden = np.load(source / "step0" / "rank" / "dump_tensor_data" / recorded["data_name"]).astype(np.float64)
    for key, reduce in (("Max", np.max), ("Min", np.min), ("Mean", np.mean)):
        assert dumped[key] == pytest.approx(float(reduce(hidden)), rel=1e-6, abs=1e-6)


def test_a_shape_mismatch_is_refused_in_one_line(clean, tmp_path):
    source, _ = clean
    debugger = PrecisionDebugger(config_path=_load_config(tmp_path, "shape", {"path": str(source), "modules": [LAYER]}))
    with pytest.raises(LoadMismatch) as caught:
        _run(_model(fault=True), debugger, _ids(length=8))
    debugger.finish()
    message = str(caught.value)
    assert "\n" not in message and LAYER in message and "input 0" in message
    assert "[2, 12, 32]" in message and "[2, 8, 32]" in message


def test_an_unknown_cell_fails_at_construction(clean, tmp_path):
    source, _ = clean
    load = {"path": str(source), "modules": ["Cell.model.layers.7.LlamaDecoderLayer.forward.0"]}
    with pytest.raises(ConfigError, match=r"load\.modules\[0\]"):
        PrecisionDebugger(config_path=_load_config(tmp_path, "bad", load))


def _train_step(model: ms.nn.Cell, debugger: PrecisionDebugger | None) -> tuple[np.ndarray, list[np.ndarray]]:
    """One forward and backward of the loss; the loss and every parameter's gradient."""
    params = model.trainable_params()
    batch = LLAMA.batch(np.random.default_rng(1))
    grad_fn = ms.value_and_grad(lambda *b: LLAMA.loss(model, b), None, params)
    if debugger is not None:
        debugger.start(model)
    loss, grads = grad_fn(*batch)
    if debugger is not None:
        debugger.stop()
        debugger.step()
        debugger.finish()
    return loss.asnumpy(), [g.asnumpy() for g in grads]


def test_loading_the_runs_own_inputs_keeps_its_numbers(tmp_path):
    dumper = PrecisionDebugger(config_path=str(write_config(tmp_path, "own", "tensor", "L0", {})))
    dumped_loss, _ = _train_step(_model(), dumper)
    bare_loss, bare_grads = _train_step(_model(), None)
    load = {"path": str(tmp_path / "own"), "modules": [LAYER]}
    loader = PrecisionDebugger(config_path=_load_config(tmp_path, "replay", load))
    loss, grads = _train_step(_model(), loader)
    assert np.array_equal(loss, bare_loss) and np.array_equal(dumped_loss, bare_loss)
    names = [p.name for p in _model().trainable_params()]
    downstream = [i for i, n in enumerate(names) if not n.startswith(("model.layers.0.", "model.embed_tokens."))]
    assert len(downstream) < len(names)
    for i in downstream:  # from the loaded cell on, backward is the bare run's, bit for bit
        assert np.array_equal(grads[i], bare_grads[i]), names[i]
    upstream = [i for i in range(len(names)) if i not in downstream]
    assert all(not grads[i].any() for i in upstream)  # the loaded inputs are constants: nothing flows upstream
