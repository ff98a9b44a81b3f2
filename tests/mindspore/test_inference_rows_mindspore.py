"""``request_id`` and ``slice`` on MindSpore (docs/pytorch/inference.md#mindspore), as
tests/pytorch/test_inference_rows.py checks them on GPT-2: the zoo's LLaMA served in batches of three
requests, one ``debugger.batch`` per batch, each cell's kept rows against float64 numpy of the same rows of
a run without msprobe, whose logits are bit for bit the dumped run's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from mindspore import Tensor

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import step_data, tensor_records, write_config  # noqa: E402
from stats_reference import close, reference  # noqa: E402
from zoo_ms import ZOO, build  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402

LLAMA = next(spec for spec in ZOO if spec.name == "llama")
CELL_ENTRY = re.compile(r"Cell\.(.+)\.\w+\.forward\.(\d+)")
BATCHES = ({"r0": 1, "r1": 1, "r2": 1}, {"r3": 1, "r4": 1, "r1": 1}, {"r5": 1, "r6": 1, "r7": 1})
LENGTH = 7


def _model():
    model = build(LLAMA)
    model.set_train(False)
    return model


def _inputs(batch: int) -> Tensor:
    return Tensor(np.random.default_rng(batch).integers(0, 96, (3, LENGTH)).astype(np.int32))


def _bare_outputs() -> tuple[list[dict[str, list[np.ndarray]]], list[np.ndarray]]:
    """Every cell's tensor outputs of a run without msprobe, per batch, by cell path, in call order."""
    model, per_batch, logits = _model(), [], []
    for path, cell in model.cells_and_names():
        if path:
            cell.register_forward_hook(lambda c, args, out, path=path: per_batch[-1].setdefault(path, []).append(
                out.asnumpy().copy()) if isinstance(out, Tensor) else None)
    for index in range(len(BATCHES)):
        per_batch.append({})
        logits.append(model(_inputs(index)).asnumpy())
    return per_batch, logits


def test_request_id_dumps_one_requests_rows_of_a_served_llama(tmp_path):
    expected, bare_logits = _bare_outputs()
    config = write_config(tmp_path, "serve", "statistics", "L0", {"request_id": "r1"})
    debugger, model, logits = PrecisionDebugger(config_path=str(config)), _model(), []
    for index, scheduled in enumerate(BATCHES):
        with debugger.batch(model, scheduled_tokens=scheduled):
            logits.append(model(_inputs(index)).asnumpy())
    debugger.finish()
    assert all(np.array_equal(a, b) for a, b in zip(logits, bare_logits, strict=True))
    for step, row in ((0, 1), (1, 2)):  # r1's row in batches 0 and 1; batch 2 does not hold it
        data, checked = step_data(tmp_path / "serve", step), 0
        for name, entry in data.items():
            match = CELL_ENTRY.fullmatch(name)
            if match is None or match.group(1) not in expected[step]:
                continue
            (record,) = list(tensor_records(entry["output"]))
            full = expected[step][match.group(1)][int(match.group(2))]
            rows = full[row:row + 1] if full.shape[0] == 3 else full
            assert record["shape"] == list(rows.shape), name
            ref = reference(rows)
            for key in ("max", "min", "mean", "norm"):
                assert close(record[key.capitalize()], ref[key], 1e-6), (name, key)
            checked += 1
        assert checked >= 8
        assert not any(record["shape"][:1] == [3] for record in tensor_records(data))
    assert not (tmp_path / "serve" / "step2").exists()
