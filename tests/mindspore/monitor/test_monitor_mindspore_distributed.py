"""TrainerMon on two MindSpore ranks (msrun, CPU collectives, data parallel with ``DistributedGradReducer``):
each rank writes its own run folder, the weight gradients it reports are the all-reduced mean of both ranks'
local gradients after the reduce and its own local gradients before it (float64 numpy of what the ranks
computed), its activations are its own batch's, and each rank trains bit for bit as it does without the
monitor."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from monitor_reference import assert_close_to_reference, read_rows

sys.path.insert(0, str(Path(__file__).parents[1]))
import msrun  # noqa: E402

RANKS = (0, 1)
CONFIG = {"xy_distribution": True, "wg_distribution": True, "ops": ["min", "max", "norm", "mean"], "format": "csv",
          "cc_distribution": {"enable": True, "cc_pre_hook": True}}

SCRIPT = """
import json, sys
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore import mint
from mindspore.communication import get_rank, init
from mindspore.ops import communication
from msprobe.mindspore import TrainerMon

out, config = sys.argv[1:3]
init()
rank = get_rank()


def train(monitored):
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(6, 16), nn.ReLU(), nn.Dense(16, 3))
    net.set_train()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    if monitored:
        TrainerMon(config).set_monitor(net, optimizer)
    reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=2)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(rank)  # another batch on each rank
    losses, kept = [], {}
    for step in range(3):
        x, y = (ms.Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((4, 6), (4, 3)))
        loss, grads = grad_fn(x, y)
        loss_sum, x_sum, y_sum = (ms.Tensor(t.asnumpy().copy()) for t in (loss, x, y))
        mint.distributed.all_reduce(loss_sum)  # in place, as torch.distributed's
        mint.distributed.all_reduce(x_sum, async_op=True).wait()
        communication.all_reduce(y_sum)  # MindSpore's other collectives, mindspore.ops.communication
        kept.update({f"{step}/loss": loss.asnumpy().copy(), f"{step}/loss_sum": loss_sum.asnumpy().copy(),
                     f"{step}/x_sum": x_sum.asnumpy().copy(), f"{step}/target": y.asnumpy().copy()})
        kept.update({f"{step}/{p.name}": g.asnumpy().copy() for p, g in zip(optimizer.parameters, grads)})
        kept[f"{step}/input"] = x.asnumpy().copy()
        optimizer(reducer(grads))
        losses.append(loss.asnumpy().tobytes().hex())
    return losses, [p.asnumpy().tobytes().hex() for p in net.trainable_params()], kept


bare = train(False)
watched = train(True)
np.savez(f"{out}/kept_rank{rank}.npz", **watched[2])
with open(f"{out}/runs_rank{rank}.json", "w") as f:
    json.dump({"bare": bare[:2], "watched": watched[:2]}, f)
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ms_monitor_2ranks")
    (folder / "c.json").write_text(json.dumps(CONFIG))
    process = msrun.start(folder, SCRIPT, str(folder), str(folder / "c.json"),
                          env={"MONITOR_OUTPUT_DIR": str(folder / "out")})
    msrun.finish(process, folder)
    return folder


def _run_dir(job: Path, rank: int) -> Path:
    (run,) = [p for p in (job / "out").iterdir() if p.is_dir() and f"-rank{rank}-" in p.name]
    return run


def test_each_rank_trains_bit_for_bit_as_without_the_monitor(job):
    for rank in RANKS:
        runs = json.loads((job / f"runs_rank{rank}.json").read_text())
        assert runs["watched"] == runs["bare"], rank


def test_weight_gradients_are_the_mean_of_both_ranks_local_gradients(job):
    kept = [dict(np.load(job / f"kept_rank{rank}.npz")) for rank in RANKS]
    for rank in RANKS:
        rows = read_rows(_run_dir(job, rank), "grad_reduced")
        assert len(rows) == 3 * 4  # 3 steps × 2 layers × (weight, bias)
        for row in rows:
            key = f"{int(row['step'])}/{row['name']}"
            mean = (kept[0][key].astype(np.float64) + kept[1][key].astype(np.float64)) / 2
            assert_close_to_reference(row, mean)


def test_unreduced_weight_gradients_are_each_ranks_own(job):
    """Before the reduce: the gradient this rank computed (a parameter hook), not the mean the optimizer got."""
    kept = [dict(np.load(job / f"kept_rank{rank}.npz")) for rank in RANKS]
    for rank in RANKS:
        rows = read_rows(_run_dir(job, rank), "grad_unreduced")
        assert len(rows) == 3 * 4
        for row in rows:
            key = f"{int(row['step'])}/{row['name']}"
            assert_close_to_reference(row, kept[rank][key])
            assert not np.array_equal(kept[0][key], kept[1][key])  # the two ranks' gradients differ


def test_collectives_are_measured_before_and_after(job):
    """cc_distribution: ``mint.distributed.all_reduce``'s tensor before the call (``pre``) and after it
    (``post``: the sum of both ranks'), the asynchronous call's once its handle was waited on; and
    ``mindspore.ops.communication.all_reduce``'s alike."""
    kept = [dict(np.load(job / f"kept_rank{rank}.npz")) for rank in RANKS]
    for rank in RANKS:
        rows = {(int(r["step"]), r["name"]): r for r in read_rows(_run_dir(job, rank), "cc")}
        assert sorted(rows) == [(step, f"all_reduce.{call}.{when}") for step in range(3) for call in range(3)
                                for when in ("post", "pre")]
        for step in range(3):
            assert_close_to_reference(rows[step, "all_reduce.0.pre"], kept[rank][f"{step}/loss"])
            assert_close_to_reference(rows[step, "all_reduce.0.post"], kept[rank][f"{step}/loss_sum"])
            for call, key in ((1, "input"), (2, "target")):
                assert_close_to_reference(rows[step, f"all_reduce.{call}.pre"], kept[rank][f"{step}/{key}"])
                both = kept[0][f"{step}/{key}"].astype(np.float64) + kept[1][f"{step}/{key}"].astype(np.float64)
                assert_close_to_reference(rows[step, f"all_reduce.{call}.post"], both)


def test_activations_are_each_ranks_own_batch(job):
    kept = [dict(np.load(job / f"kept_rank{rank}.npz")) for rank in RANKS]
    for rank in RANKS:
        rows = {int(r["step"]): r for r in read_rows(_run_dir(job, rank), "actv") if r["name"] == "0.input"}
        assert sorted(rows) == [0, 1, 2]
        for step, row in rows.items():
            assert_close_to_reference(row, kept[rank][f"{step}/input"])
    assert not np.array_equal(kept[0]["0/input"], kept[1]["0/input"])
