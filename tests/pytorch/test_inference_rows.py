"""Inference dumps of a serving loop (docs/pytorch/inference.md) on GPT-2 built from its config: one step per
request batch through ``debugger.batch``, ``request_id`` keeping one request's rows, ``slice`` keeping a range
of positions; every kept statistic, checksum and tensor file checked against float64 numpy of the same rows
of a run without msprobe, whose logits and generated tokens are bit for bit the dumped run's."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import step_data, tensor_records, write_config
from stats_reference import close, reference
from zoo import ZOO, train

from msprobe.pytorch import PrecisionDebugger

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")
MODULE_ENTRY = re.compile(r"Module\.(.+)\.\w+\.forward\.(\d+)")
# Three serving batches of three requests each (one row per request), the third without request "r1".
BATCHES = ({"r0": 1, "r1": 1, "r2": 1}, {"r3": 1, "r1": 1, "r4": 1}, {"r5": 1, "r6": 1, "r7": 1})
LENGTH = 7


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return GPT2.build().eval()


def _inputs(batch: int) -> torch.Tensor:
    return torch.randint(0, 96, (3, LENGTH), generator=torch.Generator().manual_seed(batch))


def _serve(model, debugger=None, *, generate: bool = False) -> list[torch.Tensor]:
    """Each batch under no_grad, as one debugger step: the logits (or generated tokens) of every batch."""
    results = []
    for index, scheduled in enumerate(BATCHES):
        with torch.no_grad():
            if debugger is None:
                results.append(_run(model, _inputs(index), generate))
            else:
                with debugger.batch(model, scheduled_tokens=scheduled):
                    results.append(_run(model, _inputs(index), generate))
    return results


def _run(model, ids: torch.Tensor, generate: bool) -> torch.Tensor:
    if generate:
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                              pad_token_id=0)
    return model(ids).logits


def _module_outputs(model) -> tuple[dict[str, list[torch.Tensor]], list]:
    """Every submodule's tensor outputs of a bare run, per batch, by module path, in call order."""
    per_batch: list[dict[str, list[torch.Tensor]]] = []
    handles = [module.register_forward_hook(
        lambda m, args, out, path=path: per_batch[-1].setdefault(path, []).append(out.clone())
        if isinstance(out, torch.Tensor) else None) for path, module in model.named_modules() if path]
    outputs = []
    for index in range(len(BATCHES)):
        per_batch.append({})
        with torch.no_grad():
            outputs.append(model(_inputs(index)).logits)
    for handle in handles:
        handle.remove()
    return per_batch, outputs


def _checked_outputs(data: dict, expected: dict[str, list[torch.Tensor]], select) -> int:
    """Each module entry's single output against float64 numpy of ``select(reference output)``."""
    checked = 0
    for name, entry in data.items():
        match = MODULE_ENTRY.fullmatch(name)
        if match is None or match.group(1) not in expected:
            continue
        (record,) = list(tensor_records(entry["output"]))
        full = expected[match.group(1)][int(match.group(2))]
        rows = select(full).numpy()
        assert record["shape"] == list(rows.shape), name
        ref = reference(rows)
        for key, value in (("Max", ref["max"]), ("Min", ref["min"]), ("Mean", ref["mean"]), ("Norm", ref["norm"])):
            assert close(record[key], value, 1e-6), (name, key, record[key], value)
        if "md5" in record:
            assert record["md5"] == f"{zlib.crc32(np.ascontiguousarray(rows).tobytes()):08x}", name
        checked += 1
    return checked


def test_request_id_dumps_one_requests_rows_of_every_batch_that_holds_it(tmp_path):
    expected, bare_logits = _module_outputs(_model())
    config = write_config(tmp_path, "serve", "statistics", "L0", {"request_id": "r1", "summary_mode": "md5"})
    debugger = PrecisionDebugger(config_path=str(config))
    logits = _serve(_model(), debugger)
    debugger.finish()
    assert all(torch.equal(a, b) for a, b in zip(logits, bare_logits, strict=True))  # msprobe changed nothing
    row_of_r1 = {0: 1, 1: 1}  # r1 is the second row of batches 0 and 1; batch 2 does not hold it
    for step, row in row_of_r1.items():
        data = step_data(tmp_path / "serve", step)
        # a tensor whose dim 0 is the batch's 3 rows keeps row 1; any other is dumped whole
        checked = _checked_outputs(data, expected[step], lambda t, r=row: t[r:r + 1] if t.shape[0] == 3 else t)
        assert checked >= 10
        assert not any(record["shape"][:1] == [3] for record in tensor_records(data))
    assert not (tmp_path / "serve" / "step2").exists()


def test_slice_keeps_positions_in_every_tensor_file_and_leaves_other_shapes_whole(tmp_path):
    expected, _ = _module_outputs(_model())
    section = {"slice": [{"dim": 1, "begin": 2, "end": 5, "size": LENGTH}]}
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "slice", "tensor", "L0", section)))
    _serve(_model(), debugger)
    debugger.finish()
    data = step_data(tmp_path / "slice", 0)

    def positions(t: torch.Tensor) -> torch.Tensor:
        return t[:, 2:5] if t.dim() > 1 and t.shape[1] == LENGTH else t

    assert _checked_outputs(data, expected[0], positions) >= 10
    files = tmp_path / "slice" / "step0" / "rank" / "dump_tensor_data"
    saved = 0
    for name, entry in data.items():
        match = MODULE_ENTRY.fullmatch(name)
        if match is None or match.group(1) not in expected[0]:
            continue
        (record,) = list(tensor_records(entry["output"]))
        stored = torch.load(files / record["data_name"], weights_only=True)
        assert torch.equal(stored, positions(expected[0][match.group(1)][int(match.group(2))])), name
        saved += 1
    assert saved >= 10


def test_generate_with_a_request_id_is_bit_identical_and_dumps_that_requests_row(tmp_path):
    bare = _serve(_model(), generate=True)
    config = write_config(tmp_path, "gen", "statistics", "mix", {"request_id": "r1"})
    debugger = PrecisionDebugger(config_path=str(config))
    generated = _serve(_model(), debugger, generate=True)
    debugger.finish()
    assert all(torch.equal(a, b) for a, b in zip(generated, bare, strict=True))
    data = step_data(tmp_path / "gen", 1)
    shapes = [record["shape"] for record in tensor_records(data)]
    assert [1, 1, 32] in shapes  # the decode steps' hidden states, of request r1 alone
    assert not any(shape[:1] == [3] for shape in shapes)


def test_a_request_no_batch_held_says_so_in_one_warning(tmp_path, caplog):
    config = write_config(tmp_path, "absent", "statistics", "L1", {"request_id": "nobody"})
    debugger = PrecisionDebugger(config_path=str(config))
    with caplog.at_level(logging.WARNING):
        _serve(_model(), debugger)
        debugger.finish()
    lines = [r.getMessage() for r in caplog.records if "msprobe dumped nothing" in r.getMessage()]
    assert lines == ["msprobe dumped nothing: request_id 'nobody' was in no selected batch (no "
                     "scheduled_tokens given to start() held it)"]


def test_malformed_scheduled_tokens_raise_one_line_at_start(tmp_path):
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "bad", "statistics", "L1",
                                                              {"request_id": "r1"})))
    with pytest.raises(ValueError, match=r"^scheduled_tokens: got \{'r1': 0\}; allowed: a dict"):
        debugger.start(scheduled_tokens={"r1": 0})
    debugger.finish()


def test_the_example_of_docs_pytorch_inference_runs_as_written(tmp_path):
    page = Path(__file__).resolve().parents[2] / "docs" / "pytorch" / "inference.md"
    code = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.parent.parent.name for p in tmp_path.rglob("dump.json")) == ["step0", "step1"]
    shapes = [record["shape"] for record in tensor_records(step_data(tmp_path / "dump", 1))]
    assert [1, 1, 32] in shapes and not any(shape[:1] == [2] for shape in shapes)


def test_a_slice_while_training_keeps_losses_and_gradients_bit_for_bit(tmp_path):
    """The cut views of tensors that require grad are made outside autograd: training is untouched, and
    the backward entries hold the kept rows of the gradients (the zoo's batch: 2 sequences of 12)."""
    section = {"slice": [{"dim": 1, "begin": 3, "end": 6, "size": 12}]}
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "train", "statistics", "mix", section)))
    expected, observed = train(GPT2), train(GPT2, debugger)
    assert all((a is None and b is None) or torch.equal(a, b)
               for run_a, run_b in zip(expected, observed) for a, b in zip(run_a, run_b))
    data = step_data(tmp_path / "train", 1)
    backward = [r["shape"] for n, e in data.items() if n.endswith("backward") for r in tensor_records(e)]
    assert [2, 3, 32] in backward and not any(len(s) > 1 and s[1] == 12 for s in backward)
