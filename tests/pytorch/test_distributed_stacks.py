"""The distributed stacks users train with, on two ranks (torchrun, gloo, CPU): FSDP2 and tensor
parallelism train bit for bit as without msprobe, their DTensor parameters recorded as local shards with
their layout; collectives are recorded with the values they produced (in place, by keyword,
asynchronous, point to point); DDP's gradient buckets are recorded by the opt-in comm hook. One torchrun per scenario
(``scripts/stacks.py``), shared by the tests of that scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parent / "scripts" / "stacks.py"
RANKS = (0, 1)


def _run(scenario: str, out: Path) -> dict[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(SCRIPT), scenario, str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in RANKS}


def _scenario(name: str):
    """A module-scoped fixture: one torchrun of scenario ``name`` → (its output folder, each rank's record)."""

    @pytest.fixture(scope="module")
    def run(tmp_path_factory):
        out = tmp_path_factory.mktemp(name)
        return out, _run(name, out)

    return run


fsdp2, collectives, tp, ddp = (_scenario(name) for name in ("fsdp2", "collectives", "tp", "ddp"))


def _data(dump: Path, rank: int, step: int = 0) -> dict:
    return json.loads((dump / f"step{step}" / f"rank{rank}" / "dump.json").read_text())["data"]


def _tensors(value) -> list[dict]:
    """The tensor records of an encoded value, depth first."""
    if isinstance(value, list):
        return [record for item in value for record in _tensors(item)]
    if isinstance(value, dict) and value.get("type") == "torch.Tensor":
        return [value]
    if isinstance(value, dict):
        return [record for item in value.values() for record in _tensors(item)]
    return []


def _assert_stats(record: dict, values: list[float]) -> None:
    reference = np.asarray(values, dtype=np.float64)
    assert record["Max"] == pytest.approx(reference.max(), rel=1e-6, abs=1e-12)
    assert record["Min"] == pytest.approx(reference.min(), rel=1e-6, abs=1e-12)
    assert record["Mean"] == pytest.approx(reference.mean(), rel=1e-6, abs=1e-9)
    assert record["Norm"] == pytest.approx(np.linalg.norm(reference), rel=1e-6, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["statistics_L0", "statistics_L1", "statistics_mix", "tensor_L1"])
def test_fsdp2_trains_bit_identical_under_the_debugger(fsdp2, run):
    out, observed = fsdp2
    for rank in RANKS:
        assert observed[rank][run] == observed[rank]["bare"]  # losses and every local shard, exactly
        assert _data(out / run, rank)  # and it wrote its dump


@pytest.mark.slow
@pytest.mark.parametrize("run", ["statistics_L0", "statistics_L1", "statistics_mix"])
def test_tensor_parallel_trains_bit_identical_under_the_debugger(tp, run):
    out, observed = tp
    for rank in RANKS:
        assert observed[rank][run] == observed[rank]["bare"]
        data = _data(out / run, rank)
        if run != "statistics_L0":  # the sharded weights reach the APIs as DTensors
            layouts = {tuple(r["dtensor"]["placements"]) for e in data.values() for r in _tensors(e) if "dtensor" in r}
            assert {("Shard(0)",), ("Shard(1)",)} <= layouts  # colwise and rowwise weights


@pytest.mark.slow
def test_fsdp2_dtensor_parameters_are_recorded_as_local_shards_with_their_layout(fsdp2):
    out, _ = fsdp2
    for rank in RANKS:
        sharded = [record for entry in _data(out / "statistics_L1", rank).values()
                   for record in _tensors(entry) if "dtensor" in record]
        assert sharded, "the optimizer's DTensor parameters are recorded"
        for record in sharded:
            layout = record["dtensor"]
            assert layout["placements"] == ["Shard(0)"]
            assert layout["mesh_shape"] == [2] and layout["mesh_ranks"] == [0, 1]
            assert layout["coordinate"] == [rank]
            assert record["shape"][1:] == layout["global_shape"][1:]
            assert record["shape"][0] * 2 >= layout["global_shape"][0]  # this rank's rows, padded shards aside


@pytest.mark.slow
def test_fsdp2_tensor_files_hold_the_local_shard(fsdp2):
    import torch

    out, _ = fsdp2
    directory = out / "tensor_L1" / "step0" / "rank1"
    data = _data(out / "tensor_L1", 1)
    record = next(r for entry in data.values() for r in _tensors(entry) if "dtensor" in r)
    tensor = torch.load(directory / "dump_tensor_data" / record["data_name"])
    assert type(tensor) is torch.Tensor and list(tensor.shape) == record["shape"]
    _assert_stats(record, tensor.double().reshape(-1).tolist())


@pytest.mark.slow
def test_collectives_record_the_values_the_collective_produced(collectives):
    out, observed = collectives
    for rank in RANKS:
        data = _data(out / "dump", rank)
        after = observed[rank]["after"]
        assert set(after) <= set(data)
        for name, tensors in after.items():
            records = _tensors(data[name]["output"])
            assert len(records) == len(tensors), name
            for record, values in zip(records, tensors):
                _assert_stats(record, values)


@pytest.mark.slow
def test_in_place_collectives_record_their_inputs_from_before_the_call(collectives):
    out, _ = collectives
    for rank in RANKS:
        data = _data(out / "dump", rank)
        logged = _tensors(data["Distributed.all_reduce.0.forward"]["input_args"])[0]
        assert logged["Max"] == 10.0 + rank  # before: this rank's own value; after: 21 on both
        broadcast = _tensors(data["Distributed.broadcast.0.forward"]["input_args"])[0]
        assert broadcast["Max"] == 100.0 + rank
        pending = _tensors(data["Distributed.all_reduce.1.forward"]["input_args"])[0]
        _assert_stats(pending, [1.0 + rank, 2.0])


@pytest.mark.slow
def test_async_collectives_hand_back_real_work_recorded_at_wait(collectives):
    out, observed = collectives
    for rank in RANKS:
        assert observed[rank]["work_is_dist_work"] is True
        names = list(_data(out / "dump", rank))
        assert names.index("Distributed.all_reduce.1.forward") < names.index("Distributed.all_reduce.2.forward")


@pytest.mark.slow
def test_ddp_bucket_hook_records_each_bucket_before_and_after_its_reduction(ddp):
    out, observed = ddp
    for rank in RANKS:
        run = observed[rank]
        assert run["buckets"]["loss"] == run["bare"]["loss"]
        assert run["buckets"]["grads"] == run["bare"]["grads"]
        assert run["buckets"]["params"] == run["bare"]["params"]
        entry = _data(out / "buckets", rank)["Distributed.ddp_bucket_all_reduce.0.forward"]
        _assert_stats(_tensors(entry["input_args"])[0], run["local_grads"])  # this rank's own gradients
        _assert_stats(_tensors(entry["output"])[0], run["buckets"]["grads"])  # the average of both ranks'
