"""msprobe on MindSpore models nobody here wrote (``zoo_ms.py``: mindcv's ResNet and ViT, MindSpore's LSTM,
a port of transformers' LLaMA), as ``tests/pytorch/test_zoo_*.py`` does for PyTorch:

- the statistics of an L1 dump are those of the tensors it saved, recomputed in float64 numpy, and the
  loss it recorded is the one the step returned and the cross entropy of the logits it saved;
- two Adam steps are bit-identical with the debugger on and off (L1, L0, mix);
- an fp16 run with one weight scaled by 1.05 against the fp32 run: compare's first divergence is in that
  layer; the fp16 run without the fault against the fp32 run: no divergence.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import tensor_records  # noqa: E402
from zoo_ms import FAULTED, ZOO, dump_one_step, in_layer, train  # noqa: E402

from msprobe.core.compare.align.entries import without_wrappers  # noqa: E402
from msprobe.mindspore import PrecisionDebugger, compare  # noqa: E402

pytestmark = pytest.mark.slow

BY_NAME = {spec.name: spec for spec in ZOO}


@pytest.fixture(scope="module", params=[spec.name for spec in ZOO])
def l1_tensor_dump(request, tmp_path_factory):
    rank_dir, loss = dump_one_step(BY_NAME[request.param], tmp_path_factory.mktemp(request.param), "tensor", "L1")
    return rank_dir, json.loads((rank_dir / "dump.json").read_text())["data"], loss


def test_l1_statistics_are_those_of_the_saved_tensors_in_float64(l1_tensor_dump):
    rank_dir, data, _ = l1_tensor_dump
    checked = 0
    for entry, record in ((e, r) for e, value in data.items() for r in tensor_records(value)):
        array = np.load(rank_dir / "dump_tensor_data" / record["data_name"], allow_pickle=False)
        if array.dtype.kind not in "fiu" or array.size == 0:
            continue
        values = array.astype(np.float64)
        rms = np.sqrt(np.mean(values * values))
        where = (entry, record["data_name"])
        assert record["shape"] == list(array.shape) or array.shape == (1,) and record["shape"] == [], where
        assert (record["Max"], record["Min"]) == (values.max(), values.min()), where
        assert abs(record["Mean"] - values.mean()) <= 1e-5 * rms + 1e-30, where
        assert record["Norm"] == pytest.approx(np.linalg.norm(values.ravel()), rel=1e-5, abs=1e-30), where
        checked += 1
    assert checked > 100


def test_the_recorded_loss_is_the_step_s_and_the_cross_entropy_of_the_recorded_logits(l1_tensor_dump):
    rank_dir, data, loss = l1_tensor_dump
    entry = data["Functional.cross_entropy.0.forward"]
    files = rank_dir / "dump_tensor_data"
    logits, labels = (np.load(files / r["data_name"]).astype(np.float64) for r in entry["input_args"][:2])
    output = np.load(files / entry["output"][0]["data_name"])
    assert output.tobytes() == np.asarray(loss).reshape(output.shape).tobytes()
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected = -log_probs[np.arange(len(labels)), labels.astype(np.int64)].mean()
    assert float(output.reshape(())) == pytest.approx(expected, rel=1e-6)


_references: dict[str, tuple] = {}


@pytest.mark.parametrize("level", ["L1", "L0", "mix"])
@pytest.mark.parametrize("name", [spec.name for spec in ZOO])
def test_two_adam_steps_are_bit_identical(tmp_path, name, level):
    spec = BY_NAME[name]
    if name not in _references:
        _references[name] = train(spec)
    losses, arrays = _references[name]
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level=level)
    observed_losses, observed_arrays = train(spec, debugger)
    assert [a.tobytes() for a in losses] == [a.tobytes() for a in observed_losses]
    changed = [i for i, (a, b) in enumerate(zip(arrays, observed_arrays)) if a.tobytes() != b.tobytes()]
    assert not changed, f"{len(changed)} of {len(arrays)} parameters and gradients changed"
    data = json.loads((tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text())["data"]
    assert any(entry.endswith("backward") or ".backward." in entry for entry in data)


def _compare(npu: Path, bench: Path, out: Path):
    return compare({"npu_path": str(npu / "dump.json"), "bench_path": str(bench / "dump.json"),
                    "stack_path": str(npu / "stack.json")}, str(out))


def _first(npu: Path, bench: Path, out: Path) -> str | None:
    result = _compare(npu, bench, out)
    return None if result.first_divergence is None else result.first_divergence.entry


@pytest.mark.parametrize("name", FAULTED)
def test_a_faulted_weight_is_named_at_its_layer_and_fp16_rounding_is_not(tmp_path, name):
    spec, layer = BY_NAME[name], FAULTED[name]
    fp32, _ = dump_one_step(spec, tmp_path / "fp32", "statistics", "mix")
    construct = json.loads((fp32 / "construct.json").read_text())
    faulted, _ = dump_one_step(spec, tmp_path / "faulted", "statistics", "mix", fp16=True, fault=layer)
    named = _first(faulted, fp32, tmp_path / "cmp_faulted")
    assert in_layer(named, layer, construct), named
    clean, _ = dump_one_step(spec, tmp_path / "fp16", "statistics", "mix", fp16=True)
    result = _compare(clean, fp32, tmp_path / "cmp_clean")
    assert result.first_divergence is None
    if name == "resnet":
        # mindcv's widths on 16x16 images, batch 2: layer3 and layer4 normalise 2 values per channel, and the
        # classifier's logits differ by 13% with nothing wrong. Before issue 27 the rule named Conv2D.9; now the
        # rows after the first such BatchNorm are reported as amplified rounding, and the faulted layer3.0.conv2,
        # after it, is named through its weight.
        assert result.amplified is not None and result.amplified.origin.startswith("Primitive.bn_train.BatchNorm.")
        assert result.amplified.origin.endswith("(normalises 2 values per channel)")


def test_at_l0_a_faulted_weight_of_an_amp_run_is_named_at_its_layer(tmp_path):
    spec, layer = BY_NAME["vit"], FAULTED["vit"]
    fp32, _ = dump_one_step(spec, tmp_path / "fp32", "statistics", "L0")
    faulted, _ = dump_one_step(spec, tmp_path / "faulted", "statistics", "L0", fp16=True, fault=layer)
    named = _first(faulted, fp32, tmp_path / "cmp")  # the amp run's name: Cell._backbone.{path}...
    assert named is not None and "._backbone" in named
    assert in_layer(without_wrappers(named), layer, json.loads((fp32 / "construct.json").read_text())), named
    clean, _ = dump_one_step(spec, tmp_path / "clean", "statistics", "L0", fp16=True)
    assert _first(clean, fp32, tmp_path / "cmp_clean") is None


def test_the_batchnorm_primitive_s_unwritten_outputs_are_recorded_as_null(tmp_path):
    """MindSpore's CPU BatchNorm (training) never writes outputs 1 and 2: their uninitialised memory made two
    identical runs differ at the first BatchNorm, and compare named it whatever the fault."""
    first, _ = dump_one_step(BY_NAME["resnet"], tmp_path / "a", "statistics", "mix")
    data = json.loads((first / "dump.json").read_text())["data"]
    entries = [entry for name, entry in data.items() if name.startswith("Primitive.") and ".BatchNorm." in name
               and name.endswith(".forward")]
    assert entries
    for entry in entries:
        output = entry["output"]
        assert output[1] is None and output[2] is None
        assert output[0]["Max"] is not None and output[3]["Max"] is not None
