"""Merging the rank dumps of a sharded run (compare.shards) on synthetic dumps, checked against float64 numpy.

Each rank's statistics are computed from its shard as a dump records them; the merged statistics must equal
those of the whole array computed directly. The end-to-end cases write real dump directories (``.npy``
tensors) and go through ``run_compare``: a tensor-parallel pair of ranks against one rank, clean and with a
5% fault in rank 1's weight shard.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.compare.api import layout_of, run_compare
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.compare.read.reader import CompareError, DumpFile
from msprobe.core.compare.read.shards import SHARDS, Layout, load_source, merge_dumps, tensor_source
from msprobe.core.compare.read.tensorfile import load_npy


def stats(a: np.ndarray) -> dict:
    x = a.astype(np.float64)
    return {"Max": float(x.max()), "Min": float(x.min()), "Mean": float(x.mean()), "Norm": float(np.linalg.norm(x))}


def value(a: np.ndarray, layout: dict | None = None, data_name: str | None = None) -> dict:
    v = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(a.shape), "requires_grad": False, **stats(a)}
    if layout is not None:
        v["dtensor"] = layout
    if data_name is not None:
        v["data_name"] = data_name
    return v


def dump(entries: dict, task: str = "statistics", path: Path = Path("x/dump.json")) -> DumpFile:
    return DumpFile(path, task, "L1", entries, path.parent / "dump_tensor_data")


def dtensor(placements: list[str], mesh_shape: list[int], rank: int, global_shape: list[int]) -> dict:
    ranks = list(range(math.prod(mesh_shape)))
    coord = [int(c) for c in np.unravel_index(rank, mesh_shape)]
    return {"placements": placements, "mesh_shape": mesh_shape, "mesh_ranks": ranks, "coordinate": coord,
            "global_shape": global_shape}


def merged_output(dumps: dict[int, DumpFile], bench: DumpFile) -> dict:
    return merge_dumps(dumps, bench).entries["Torch.f.0.forward"]["output"][0]


def check_stats(merged: dict, whole: np.ndarray) -> None:
    want = stats(whole)
    assert merged["Max"] == want["Max"] and merged["Min"] == want["Min"]
    assert merged["Mean"] == pytest.approx(want["Mean"], rel=1e-12, abs=1e-15)
    assert merged["Norm"] == pytest.approx(want["Norm"], rel=1e-12)
    assert merged["shape"] == list(whole.shape)


@pytest.mark.parametrize("ranks,axis", [(2, 1), (3, 0), (4, 2)])
def test_shape_rule_concatenates_uneven_shards_exactly(ranks, axis):
    whole = np.random.default_rng(ranks).standard_normal((5, 7, 6)).astype(np.float32) * 3 + 0.5
    shards = np.array_split(whole, ranks, axis=axis)  # uneven where the size does not divide, as torch.chunk
    dumps = {r: dump({"Torch.f.0.forward": {"output": [value(s)]}}) for r, s in enumerate(shards)}
    bench = dump({"Torch.f.0.forward": {"output": [value(whole)]}})
    merged = merged_output(dumps, bench)
    check_stats(merged, whole)
    assert merged[SHARDS]["layout"] == f"concatenated along dim {axis} (by shape)"
    assert merged[SHARDS]["ranks"] == list(range(ranks)) and merged[SHARDS]["note"] is None


def test_recorded_2d_mesh_nests_shards_as_torch_does(tmp_path):
    """Mesh (2, 2), Shard(0) on both mesh dimensions: torch chunks along dim 0 by the outer mesh dimension,
    then each chunk again by the inner one. Tensor files are loaded and joined in that order."""
    whole = np.arange(8 * 3, dtype=np.float32).reshape(8, 3) ** 1.5
    outer = np.array_split(whole, 2, axis=0)
    pieces = {2 * i + j: part for i, half in enumerate(outer) for j, part in enumerate(np.array_split(half, 2))}
    dumps = {}
    for rank, part in pieces.items():
        rank_dir = tmp_path / f"rank{rank}"
        (rank_dir / "dump_tensor_data").mkdir(parents=True)
        np.save(rank_dir / "dump_tensor_data" / "out.npy", part)
        layout = dtensor(["Shard(0)", "Shard(0)"], [2, 2], rank, [8, 3])
        dumps[rank] = dump({"Torch.f.0.forward": {"output": [value(part, layout, "out.npy")]}}, "tensor",
                           rank_dir / "dump.json")
    merged = merged_output(dumps, dump({}))
    check_stats(merged, whole)
    assert merged[SHARDS]["layout"] == "Shard(0)/Shard(0) (recorded)" and "dtensor" not in merged
    loaded = load_source(load_npy, tensor_source(dumps[0], merged), "NPU")
    np.testing.assert_array_equal(loaded, whole)


def test_recorded_shard_and_replicate_on_a_2d_mesh():
    whole = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    cols = np.array_split(whole, 2, axis=1)
    layouts = [dtensor(["Replicate()", "Shard(1)"], [2, 2], r, [4, 6]) for r in range(4)]
    dumps = {r: dump({"Torch.f.0.forward": {"output": [value(cols[r % 2], layouts[r])]}}) for r in range(4)}
    merged = merged_output(dumps, dump({}))
    check_stats(merged, whole)
    assert merged[SHARDS]["note"] is None


def test_replicas_that_disagree_are_marked_and_the_lowest_rank_is_compared():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    dumps = {0: dump({"Torch.f.0.forward": {"output": [value(a)]}}),
             1: dump({"Torch.f.0.forward": {"output": [value(a * 1.5)]}})}
    merged = merged_output(dumps, dump({"Torch.f.0.forward": {"output": [value(a)]}}))
    check_stats(merged, a)
    assert "ranks disagree on this replicated value (Max 1.0 on rank 0, 1.5 on rank 1)" in merged[SHARDS]["note"]
    alone = merged_output(dumps, dump({}))  # no counterpart: equal local shapes tell replicas from shards apart
    assert alone[SHARDS]["layout"] == "rank 0's (no counterpart in the other run to merge by)"
    assert alone[SHARDS]["note"] is None and alone["Max"] == 1.0


def test_partial_statistics_are_left_out_and_said_so_tensors_are_summed(tmp_path):
    parts = [np.random.default_rng(r).standard_normal((3, 3)).astype(np.float32) for r in range(2)]
    layouts = [dtensor(["Partial(sum)"], [2], r, [3, 3]) for r in range(2)]
    statistics = {r: dump({"Torch.f.0.forward": {"output": [value(p, layouts[r])]}}) for r, p in enumerate(parts)}
    merged = merged_output(statistics, dump({}))
    assert all(merged[k] is None for k in ("Max", "Min", "Mean", "Norm"))
    assert "Partial(sum) value cannot be computed from each rank's statistics" in merged[SHARDS]["note"]
    tensors = {}
    for r, p in enumerate(parts):
        (tmp_path / f"rank{r}" / "dump_tensor_data").mkdir(parents=True)
        np.save(tmp_path / f"rank{r}" / "dump_tensor_data" / "o.npy", p)
        tensors[r] = dump({"Torch.f.0.forward": {"output": [value(p, layouts[r], "o.npy")]}}, "tensor",
                          tmp_path / f"rank{r}" / "dump.json")
    merged = merged_output(tensors, dump({}))
    np.testing.assert_array_equal(load_source(load_npy, merged["source"], "NPU"), parts[0] + parts[1])


def test_shards_that_fit_no_rule_keep_the_lowest_rank_and_say_why():
    a, b = np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)
    dumps = {0: dump({"Torch.f.0.forward": {"output": [value(a)]}}),
             1: dump({"Torch.f.0.forward": {"output": [value(a)]}})}
    merged = merged_output(dumps, dump({"Torch.f.0.forward": {"output": [value(b)]}}))
    assert merged["shape"] == [2, 3] and "cannot be merged into the other run's [2, 4]" in merged[SHARDS]["note"]


def test_pipeline_stages_are_renumbered_and_ordered_as_one_rank_runs_them():
    x = np.ones((2, 2), np.float32)
    stage = {"Functional.linear.0.forward": {"output": [value(x)]},
             "Functional.linear.0.backward": {"input": [value(x)]},
             "Module.layers.Linear.forward.0": {"output": [value(x)]}}
    stage1 = {k.replace("layers", "layers2"): v for k, v in stage.items()}
    merged = merge_dumps({0: dump(stage), 1: dump(stage1)}, dump({}), Layout(tp=1, pp=2))
    assert list(merged.entries) == ["Functional.linear.0.forward", "Module.layers.Linear.forward.0",
                                    "Functional.linear.1.forward", "Module.layers2.Linear.forward.0",
                                    "Functional.linear.1.backward", "Functional.linear.0.backward"]


def test_bad_layouts_and_md5_dumps_are_errors_naming_the_values():
    with pytest.raises(CompareError, match=r"'tp' is 0; allowed: a positive integer"):
        layout_of({"tp": 0})
    with pytest.raises(CompareError, match=r"'pp' is 'two'"):
        Layout.checked(None, "two")
    one = dump({"Torch.f.0.forward": {"output": [value(np.ones(2, np.float32))]}})
    with pytest.raises(CompareError, match=r"tp=3 × pp=1 = 3 ranks, but the step has 2 \(0, 1\)"):
        merge_dumps({0: one, 1: one}, one, Layout(tp=3))
    md5 = dump({"Torch.f.0.forward": {"output": [{**value(np.ones(2, np.float32)), "md5": "ab"}]}})
    with pytest.raises(CompareError, match="md5 checksums of shards cannot be merged"):
        merge_dumps({0: md5, 1: md5}, md5)


# ------------------------------------------------------------------ end to end through run_compare


def _write(rank_dir: Path, task: str, entries: dict, arrays: dict[str, np.ndarray]) -> None:
    (rank_dir / "dump_tensor_data").mkdir(parents=True)
    for name, array in arrays.items():
        np.save(rank_dir / "dump_tensor_data" / name, array)
    (rank_dir / "dump.json").write_text(json.dumps({"task": task, "level": "L1", "framework": "pytorch",
                                                    "dump_data_dir": None, "data": entries}))


def _mlp_run(root: Path, task: str, tp: int, fault: float) -> None:
    """x → colwise linear (local output shard, plain) → relu → rowwise linear (all-reduced, plain): the TP
    layout of a Megatron MLP, in float32, with float64 statistics of every local tensor."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w1 = (rng.standard_normal((16, 8)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((8, 16)) / 4).astype(np.float32)
    w1_shards, w2_shards = np.array_split(w1, tp, axis=0), np.array_split(w2, tp, axis=1)
    if fault:
        w1_shards[-1] = (w1_shards[-1] * np.float32(fault)).astype(np.float32)
    hidden = [np.maximum(x @ w.T, 0) for w in w1_shards]
    y = sum(h @ w.T for h, w in zip(hidden, w2_shards))

    def v(a, name, layout=None):
        return value(a, layout, f"{name}.npy" if task == "tensor" else None)

    for rank in range(tp):
        w1_layout = dtensor(["Shard(0)"], [tp], rank, [16, 8]) if tp > 1 else None
        w2_layout = dtensor(["Shard(1)"], [tp], rank, [8, 16]) if tp > 1 else None
        h_pre = x @ w1_shards[rank].T
        entries = {
            "Functional.linear.0.forward": {"input_args": [v(x, "x"), v(w1_shards[rank], "w1", w1_layout)],
                                            "input_kwargs": {}, "output": [v(h_pre, "h_pre")]},
            "Functional.relu.0.forward": {"input_args": [v(h_pre, "h_pre")], "input_kwargs": {},
                                          "output": [v(hidden[rank], "h")]},
            "Functional.linear.1.forward": {"input_args": [v(hidden[rank], "h"),
                                                           v(w2_shards[rank], "w2", w2_layout)],
                                            "input_kwargs": {}, "output": [v(y, "y")]},
        }
        arrays = {"x.npy": x, "w1.npy": w1_shards[rank], "h_pre.npy": h_pre, "h.npy": hidden[rank],
                  "w2.npy": w2_shards[rank], "y.npy": y}
        _write(root / (f"rank{rank}" if tp > 1 else "rank"), task, entries, arrays if task == "tensor" else {})


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_tp_pair_against_one_rank_clean_and_with_a_fault_on_rank1(tmp_path, task):
    _mlp_run(tmp_path / "single", task, 1, 0)
    bench = {"npu_path": None, "bench_path": tmp_path / "single" / "rank" / "dump.json", "stack_path": None}
    for fault, expected in ((0, None), (1.05, "Functional.linear.0.forward")):
        run = tmp_path / f"tp{fault}"
        _mlp_run(run, task, 2, fault)
        result = run_compare(load_npy, {**bench, "npu_path": run}, tmp_path / f"out{fault}",
                             CompareOptions(workers=1, progress=False))
        assert result.not_compared == 0
        found = result.first_divergence
        assert (found.entry if found else None) == expected
        rows = {r.npu.name: r for r in result.results}
        assert "merged from ranks 0,1: concatenated along dim 1 (by shape)" in rows[
            "Functional.linear.0.forward.output.0"].messages
        assert "merged from ranks 0,1: Shard(0) (recorded)" in rows["Functional.linear.0.forward.input.1"].messages
        diverging = [name for name, r in rows.items() if r.diverges]
        if fault:  # rank 1's weight shard is the first diverging value; then everything downstream of it
            assert diverging[0] == "Functional.linear.0.forward.input.1"
            assert "Functional.linear.0.forward.input.0" not in diverging
            assert "Functional.linear.1.forward.output.0" in diverging
        else:
            assert diverging == []
