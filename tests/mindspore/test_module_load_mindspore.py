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

import dump_json  # noqa: E402
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
    dump_json.framed_step(debugger, model, lambda: model(ids), hooks)
    return seen


def _output_array(dump_path: Path) -> np.ndarray:
    record = dump_json.step_data(dump_path, 0)[LAYER]["output"][0]
    return np.load(dump_path / "step0" / "rank" / "dump_tensor_data" / record["data_name"]).astype(np.float64)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    base = tmp_path_factory.mktemp("load_ms")
    debugger = PrecisionDebugger(config_path=str(dump_json.write_config(base, "clean", "tensor", "L0", {})))
    outputs = _run(_model(), debugger, _ids())
    debugger.finish()
    return base / "clean", outputs


def test_loaded_cell_computes_the_clean_output(clean, tmp_path):
    source, expected = clean
    assert np.array_equal(_output_array(source), expected["l1"])  # the dump saved what the cell returned
    run = lambda debugger: _run(_model(fault=True), debugger, _ids())  # noqa: E731
    dump_json.assert_load_cuts_off_upstream(PrecisionDebugger, run, source, expected, tmp_path, LAYER,
                                            upstream="l0", loaded="l1")


def test_dump_after_load_records_the_clean_output(clean, tmp_path):
    source, expected = clean
    load = {"path": str(source), "modules": [LAYER], "dump_after_load": True}
    debugger = PrecisionDebugger(config_path=dump_json.load_config(tmp_path, "after", load, task="tensor"))
    _run(_model(fault=True), debugger, _ids())
    debugger.finish()
    assert np.array_equal(_output_array(tmp_path / "after"), _output_array(source))
    assert np.array_equal(_output_array(tmp_path / "after"), expected["l1"])
    dump_json.assert_dumped_the_loaded_input(source, tmp_path / "after", LAYER, np.load)


def test_a_shape_mismatch_is_refused_in_one_line(clean, tmp_path):
    source, _ = clean
    run = lambda debugger: _run(_model(fault=True), debugger, _ids(length=8))  # noqa: E731
    dump_json.assert_mismatch_refused(PrecisionDebugger, run, source, tmp_path, LAYER, LoadMismatch,
                                      "[2, 12, 32]", "[2, 8, 32]")


def test_an_unknown_cell_fails_at_construction(clean, tmp_path):
    source, _ = clean
    load = {"path": str(source), "modules": ["Cell.model.layers.7.LlamaDecoderLayer.forward.0"]}
    with pytest.raises(ConfigError, match=r"load\.modules\[0\]"):
        PrecisionDebugger(config_path=dump_json.load_config(tmp_path, "bad", load))


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
    dumper = PrecisionDebugger(config_path=str(dump_json.write_config(tmp_path, "own", "tensor", "L0", {})))
    dumped_loss, _ = _train_step(_model(), dumper)
    bare_loss, bare_grads = _train_step(_model(), None)
    load = {"path": str(tmp_path / "own"), "modules": [LAYER]}
    loader = PrecisionDebugger(config_path=dump_json.load_config(tmp_path, "replay", load))
    loss, grads = _train_step(_model(), loader)
    assert np.array_equal(loss, bare_loss) and np.array_equal(dumped_loss, bare_loss)
    names = [p.name for p in _model().trainable_params()]
    downstream = [i for i, n in enumerate(names) if not n.startswith(("model.layers.0.", "model.embed_tokens."))]
    assert len(downstream) < len(names)
    for i in downstream:  # from the loaded cell on, backward is the bare run's, bit for bit
        assert np.array_equal(grads[i], bare_grads[i]), names[i]
    upstream = [i for i in range(len(names)) if i not in downstream]
    assert all(not grads[i].any() for i in upstream)  # the loaded inputs are constants: nothing flows upstream


class _Scaled(ms.nn.Cell):
    """bfloat16 through a cell: MindSpore's CPU kernels multiply and add it (numpy cannot hold it)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def construct(self, x):
        return x * self.scale + 1


class _Chain(ms.nn.Cell):
    def __init__(self, upstream: float) -> None:
        super().__init__()
        self.up, self.down = _Scaled(upstream), _Scaled(3.0)

    def construct(self, x):
        return self.down(self.up(x))


def test_a_bfloat16_input_is_loaded_as_bfloat16(tmp_path):
    """The dump saves bfloat16 widened to float32 (.npy); load narrows it back, exactly, and the cell's output
    is the clean run's (checked in float64 numpy against the bfloat16 values the clean run fed it)."""
    x = ms.Tensor(np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)).astype(ms.bfloat16)
    dumper = PrecisionDebugger(config_path=str(dump_json.write_config(tmp_path, "bf16", "tensor", "L0", {})))
    model = _Chain(2.0)
    dumper.start(model)
    clean = model(x)
    dumper.stop()
    dumper.finish()
    load = {"path": str(tmp_path / "bf16"), "modules": ["Cell.down._Scaled.forward.0"]}
    loader = PrecisionDebugger(config_path=dump_json.load_config(tmp_path, "bf16_load", load))
    faulted = _Chain(2.5)
    loader.start(faulted)
    observed = faulted(x)
    loader.stop()
    loader.finish()
    assert observed.dtype == ms.bfloat16
    fed = (x.astype(ms.float32).asnumpy().astype(np.float64) * 2 + 1)  # exact in bfloat16 for these values
    assert np.array_equal(observed.astype(ms.float32).asnumpy(), clean.astype(ms.float32).asnumpy())
    assert np.allclose(observed.astype(ms.float32).asnumpy(), fed * 3 + 1, rtol=1e-2)


def test_load_is_refused_in_static_graph(clean, tmp_path):
    source, _ = clean
    config = tmp_path / "l2.json"
    config.write_text(json.dumps({"task": "tensor", "level": "L2", "dump_path": str(tmp_path / "l2"),
                                  "load": {"path": str(source), "modules": [LAYER]}}))
    with pytest.raises(ConfigError, match=r"load: got '\{\.\.\.\}'; allowed: no load key at level L2") as caught:
        PrecisionDebugger(config_path=str(config))
    assert len(caught.value.problems) == 1
