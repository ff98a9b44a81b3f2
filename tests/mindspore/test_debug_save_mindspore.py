"""Level debug's ``PrecisionDebugger.save`` on MindSpore
(docs/mindspore/dump.md#level-debug-save-and-parameters_grad), on mindcv's VisionTransformer: the saved logits
against float64 numpy of what the training held, their gradient against the float64 cross-entropy gradient
``(softmax - onehot) / batch``; and the cells' parameters_grad entries of the LLaMA port against
``value_and_grad``'s gradients; each training bit for bit that of a run without msprobe."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))
import mindspore as ms  # noqa: E402
from dump_json import parameters_grad_records, write_config  # noqa: E402
from mindspore import nn, ops  # noqa: E402
from stats_reference import close, reference  # noqa: E402
from zoo_ms import ZOO, build, train  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402

VIT = next(spec for spec in ZOO if spec.name == "vit")
STATS = {"Max": "max", "Min": "min", "Mean": "mean", "Norm": "norm"}


def _matches(record: dict, array: np.ndarray) -> bool:
    expected = reference(array)
    return list(record["shape"]) == list(array.shape) and all(
        close(record[key], expected[name], 1e-5) for key, name in STATS.items())


def _train(debugger: PrecisionDebugger | None, steps: int = 2) -> tuple[list, list[dict]]:
    model = build(VIT)
    optimizer = nn.Adam(model.trainable_params(), 1e-2)
    rng = np.random.default_rng(1)
    held: list[dict] = []
    outcome: list = []
    for _ in range(steps):
        images, labels = VIT.batch(rng)
        seen: list = []

        def loss_fn(images, labels, seen=seen):
            logits = model(images)
            seen.append(logits)
            if debugger is not None:
                debugger.save({"logits": logits, "extra": [2, "vit"]}, "head")
                debugger.save(labels, "labels", save_backward=False)
            return ops.cross_entropy(logits, labels)

        loss, grads = ms.value_and_grad(loss_fn, None, optimizer.parameters)(images, labels)
        held.append({"logits": seen[0].asnumpy().astype(np.float64), "labels": labels.asnumpy()})
        optimizer(grads)
        outcome += [loss.asnumpy(), *[g.asnumpy() for g in grads]]
        if debugger is not None:
            debugger.step()
    return outcome + [p.asnumpy() for p in model.trainable_params()], held


def _cross_entropy_grad(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax = shifted / shifted.sum(axis=1, keepdims=True)
    softmax[np.arange(len(labels)), labels] -= 1.0
    return softmax / len(labels)


def test_saved_logits_and_their_gradient_are_those_the_vit_held(tmp_path):
    bare, _ = _train(None)
    config = write_config(tmp_path, "dbg", "statistics", "debug", {})
    observed, held = _train(PrecisionDebugger(config_path=str(config)))
    assert all(np.array_equal(a, b) for a, b in zip(bare, observed))  # the training bit for bit
    for step, arrays in enumerate(held):
        data = json.loads((tmp_path / "dbg" / f"step{step}" / "rank" / "debug.json").read_text())["data"]
        assert set(data) == {"head.0.debug", "head_grad.0.debug", "labels.0.debug"}
        assert _matches(data["head.0.debug"]["logits"], arrays["logits"])
        assert data["head.0.debug"]["extra"] == [{"type": "int", "value": 2}, {"type": "str", "value": "vit"}]
        grad = data["head_grad.0.debug"]
        assert _matches(grad["logits"], _cross_entropy_grad(arrays["logits"], arrays["labels"]))
        assert grad["extra"] == [None, None]


LLAMA = next(spec for spec in ZOO if spec.name == "llama")


def test_parameters_grad_entries_are_each_cells_gradients_and_training_is_bit_identical(tmp_path):
    config = write_config(tmp_path, "l0", "statistics", "L0", {})
    debugger = PrecisionDebugger(config_path=str(config))
    bare, observed = train(LLAMA), train(LLAMA, debugger)
    assert all(np.array_equal(a, b) for run_a, run_b in zip(bare, observed) for a, b in zip(run_a, run_b))
    model = build(LLAMA)  # the step-0 gradients, taken again without msprobe
    params = model.trainable_params()
    batch = LLAMA.batch(np.random.default_rng(1))
    _, grads = ms.value_and_grad(lambda *b: LLAMA.loss(model, b), None, params)(*batch)
    grad_of = {p.name: g.asnumpy().astype(np.float64) for p, g in zip(params, grads)}
    data = json.loads((tmp_path / "l0" / "step0" / "rank" / "dump.json").read_text())["data"]
    cells = [(path, cell, {n: p for n, p in cell._params.items() if p is not None and p.requires_grad})
             for path, cell in model.cells_and_names()]
    for record, param in parameters_grad_records(data, "Cell", cells):
        assert _matches(record, grad_of[param.name])
