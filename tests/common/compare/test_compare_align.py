"""Alignment: extra or missing APIs do not shift the rest; -f ignores counts; -dm maps names."""

from __future__ import annotations

import itertools
import random

from msprobe.core.compare.align.entries import align_entries, common_subsequence, count_free, pair_rows
from msprobe.core.compare.read.rows import flatten_entry


def tensor(shape):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape)}


def entries(*names, shape=(2,)):
    return {n: flatten_entry(n, {"input_args": [tensor(shape)], "output": [tensor(shape)]}) for n in names}


def lcs_length(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, j in itertools.product(range(len(a)), range(len(b))):
        table[i + 1][j + 1] = table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_common_subsequence_is_a_longest_one():
    rng = random.Random(1)
    for _ in range(200):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 12))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 12))]
        pairs = common_subsequence(a, b)
        assert all(a[i] == b[j] for i, j in pairs)
        assert all(p[0] < q[0] and p[1] < q[1] for p, q in zip(pairs, pairs[1:]))
        assert len(pairs) == lcs_length(a, b)


def test_extra_api_on_either_side_does_not_shift_the_rest():
    npu = entries("Torch.add.0.forward", "Torch.cast.0.forward", "Torch.mul.0.forward", "Torch.sum.0.forward")
    bench = entries("Torch.add.0.forward", "Torch.mul.0.forward", "Torch.sum.0.forward", "Torch.exp.0.forward")
    pairs = align_entries(npu, bench)
    assert ("Torch.mul.0.forward", "Torch.mul.0.forward") in pairs
    assert ("Torch.sum.0.forward", "Torch.sum.0.forward") in pairs
    assert ("Torch.cast.0.forward", None) in pairs and (None, "Torch.exp.0.forward") in pairs
    assert len(pairs) == 5


def test_shifted_count_pairs_by_kind_and_structure():
    npu = {**entries("Torch.add.0.forward"), **entries("Torch.add.1.forward", shape=(5,)),
           **entries("Torch.add.2.forward")}
    bench = {**entries("Torch.add.0.forward"), **entries("Torch.add.1.forward")}
    pairs = align_entries(npu, bench)
    assert ("Torch.add.2.forward", "Torch.add.1.forward") in pairs
    assert ("Torch.add.1.forward", None) in pairs


def test_fuzzy_ignores_counts_and_mapping_renames():
    npu = entries("Torch.add.3.forward", "NPU.npu_rms_norm.0.forward")
    bench = entries("Torch.add.0.forward", "Functional.rms_norm.0.forward")
    assert count_free("Module.a.b.Linear.forward.2") == "Module.a.b.Linear.forward"
    mapping = {"NPU.npu_rms_norm.0.forward": "Functional.rms_norm.0.forward"}
    pairs = align_entries(npu, bench, fuzzy=True, mapping=mapping)
    assert pairs == [("Torch.add.3.forward", "Torch.add.0.forward"),
                     ("NPU.npu_rms_norm.0.forward", "Functional.rms_norm.0.forward")]


def test_rows_pair_by_argument_path_and_keep_one_sided_rows():
    npu = flatten_entry("Torch.add.0.forward", {"input_args": [tensor((2,)), {"type": "int", "value": 1}],
                                                "input_kwargs": {"alpha": {"type": "float", "value": 2.0}},
                                                "output": [tensor((2,))]})
    bench = flatten_entry("Torch.add.0.forward", {"input_args": [tensor((2,))], "input_kwargs": {},
                                                  "output": [tensor((2,)), None]})
    assert [r.suffix for r in npu] == ["input.0", "input.1", "input.alpha", "output.0"]
    pairs = pair_rows(npu, bench)
    assert [(p.npu and p.npu.suffix, p.bench and p.bench.suffix) for p in pairs] == [
        ("input.0", "input.0"), ("input.1", None), ("input.alpha", None), ("output.0", "output.0"),
        (None, "output.1")]


def test_mindspore_wrapper_cells_do_not_hide_a_pair():
    """amp (and WithLossCell) keep the user's cells as ``_backbone``; an fp16 run's cells pair with the
    fp32 run's (the zoo's L0 fault test runs this on mindcv's ViT)."""
    from msprobe.core.compare.align.entries import without_wrappers

    assert without_wrappers("Cell._backbone.blocks.0.Block.forward.0") == "Cell.blocks.0.Block.forward.0"
    assert without_wrappers("Cell._backbone.norm._backbone.LayerNorm.backward.1") == "Cell.norm.LayerNorm.backward.1"
    assert without_wrappers("Cell.fc.Dense.forward.0") == "Cell.fc.Dense.forward.0"
    assert without_wrappers("Module._backbone.Linear.forward.0") == "Module._backbone.Linear.forward.0"
    assert without_wrappers("Functional._backbone.0.forward") == "Functional._backbone.0.forward"


def test_parameters_grad_entries_pair_by_name_wherever_each_run_wrote_them():
    """A tensor-parallel run writes its modules' parameters_grad entries before its backward calls, a single
    process among them: each still pairs with its namesake, kept where the NPU side wrote it."""
    grads = ["Module.fc2.Linear.parameters_grad.0", "Module.fc1.Linear.parameters_grad.0"]
    calls = ["Functional.linear.1.backward", "Module.fc2.Linear.backward.0", "Functional.linear.0.backward",
             "Module.fc1.Linear.backward.0"]
    npu = entries(*grads, *calls)
    bench = entries(calls[0], calls[1], grads[0], calls[2], calls[3], grads[1])
    pairs = align_entries(npu, bench)
    assert pairs == [(n, n) for n in [*grads, *calls]]
    assert align_entries(bench, npu) == [(n, n) for n in bench]
