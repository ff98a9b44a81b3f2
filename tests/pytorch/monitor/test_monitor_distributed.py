"""TrainerMon on two ranks (torchrun, gloo, CPU): DDP with and without gradient accumulation, FSDP2.
Training is bit for bit the same with the monitor on; weight gradients before the reduce are each rank's
own, after it they are the ranks' mean; FSDP2's are each rank's shard; activations carry micro-steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from monitor_reference import assert_close_to_reference, read_rows

SCRIPT = Path(__file__).parent / "scripts" / "monitor_ranks.py"
CONFIG = dict(xy_distribution=True, wg_distribution=True, mv_distribution=True, format="csv")


def _scenario(name: str, config: dict = CONFIG):
    @pytest.fixture(scope="module")
    def run(tmp_path_factory):
        out = tmp_path_factory.mktemp(name)
        (out / "config.json").write_text(json.dumps(config))
        result = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
             name, str(out)],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        )
        assert result.returncode == 0, result.stderr[-4000:]
        observed = {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)}
        run_dirs = {rank: next((out / "monitor").glob(f"*-rank{rank}-*")) for rank in (0, 1)}
        return observed, run_dirs

    return run


ddp, ddp_acc, fsdp2 = (_scenario(name) for name in ("ddp", "ddp_acc", "fsdp2"))
ddp_cc = _scenario("ddp_cc", dict(CONFIG, cc_distribution={"enable": True, "cc_pre_hook": True}))


def _rows(run_dir: Path, group: str, step: int = 0) -> dict[str, dict]:
    return {row["name"]: row for row in read_rows(run_dir, group) if int(row["step"]) == step}


def _assert_rows_are(rows: dict[str, dict], tensors: dict[str, list], unchecked: set[str] = frozenset()) -> None:
    """One row per observed tensor (and the ``unchecked`` names), each equal to float64 numpy of its tensor."""
    assert set(rows) == set(tensors) | unchecked, sorted(rows)
    for name, values in tensors.items():
        assert_close_to_reference(rows[name], np.asarray(values))


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["ddp", "ddp_acc", "fsdp2", "ddp_cc"])
def test_training_bit_identical_on_two_ranks(stack, request):
    observed, _ = request.getfixturevalue(stack)
    for rank in (0, 1):
        assert observed[rank]["monitored"]["losses"] == observed[rank]["bare"]["losses"]
        assert observed[rank]["monitored"]["params"] == observed[rank]["bare"]["params"]


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["ddp", "ddp_acc"])
def test_ddp_gradients_before_and_after_the_all_reduce(stack, request):
    observed, run_dirs = request.getfixturevalue(stack)
    local = {rank: observed[rank]["monitored"]["local_grads"] for rank in (0, 1)}
    for rank in (0, 1):
        unreduced, reduced = _rows(run_dirs[rank], "grad_unreduced"), _rows(run_dirs[rank], "grad_reduced")
        assert set(unreduced) == set(reduced) == set(local[rank])
        for name, grad in local[rank].items():
            assert_close_to_reference(unreduced[name], np.asarray(grad))
            mean = (np.asarray(local[0][name]) + np.asarray(local[1][name])) / 2
            assert_close_to_reference(reduced[name], mean, rel=1e-4)
            assert_close_to_reference(reduced[name], np.asarray(observed[rank]["monitored"]["optimizer_grads"][name]))
    name = "model.layers.0.mlp.down_proj.weight"
    assert _rows(run_dirs[0], "grad_unreduced")[name]["norm"] != _rows(run_dirs[1], "grad_unreduced")[name]["norm"]


@pytest.mark.slow
def test_grad_accumulation_rows_per_micro_step(ddp_acc):
    _, run_dirs = ddp_acc
    rows = [row for row in read_rows(run_dirs[0], "actv") if row["name"] == "lm_head.output"]
    assert [(int(r["step"]), int(r["micro_step"])) for r in rows] == [(s, m) for s in range(3) for m in range(2)]
    grad_rows = [row for row in read_rows(run_dirs[0], "actv_grad") if row["name"] == "lm_head.output"]
    assert sorted((int(r["step"]), int(r["micro_step"])) for r in grad_rows) == [
        (s, m) for s in range(3) for m in range(2)]


@pytest.mark.slow
def test_fsdp2_gradients_are_each_ranks_shard(fsdp2):
    observed, run_dirs = fsdp2
    for rank in (0, 1):
        _assert_rows_are(_rows(run_dirs[rank], "grad_reduced"), observed[rank]["monitored"]["optimizer_grads"])
        assert not list(run_dirs[rank].glob("grad_unreduced_*.csv"))  # FSDP2 reduce-scatters inside its hooks
        assert _rows(run_dirs[rank], "exp_avg")


@pytest.mark.slow
def test_collectives_of_the_loop_before_and_after(ddp_cc):
    observed, run_dirs = ddp_cc
    for rank in (0, 1):
        rows = _rows(run_dirs[rank], "cc")
        # the gather's output list before the call is uninitialised memory, not compared; DDP's bucketed all-reduce
        # runs in C++ and is not seen
        _assert_rows_are(rows, observed[rank]["monitored"]["collectives"], {"all_gather.0.pre_0", "all_gather.0.pre_1"})
        assert rows["all_reduce.0.post"]["norm"] != rows["all_reduce.0.pre"]["norm"]
        assert {int(r["step"]) for r in read_rows(run_dirs[rank], "cc")} == {0, 1, 2}
