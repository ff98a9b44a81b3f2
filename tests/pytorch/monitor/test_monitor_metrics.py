"""TrainerMon on a real transformers model: every metric equals float64 numpy on the same tensors, the
run's numbers are bit for bit those of the run without it, and the files have upstream's layout."""

from __future__ import annotations

import gc
import os
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from monitor_models import batches, llama, params_bytes, train, write_config
from monitor_reference import assert_close_to_reference, only_run_dir, read_rows

EVERYTHING = dict(xy_distribution=True, wg_distribution=True, mv_distribution=True, param_distribution=True,
                  ops=["min", "max", "norm", "zeros", "nans", "mean"], format=["csv", "sqlite"])


class Capture:
    """The test's own copies of the tensors the monitor should have measured, keyed as its rows name them."""

    def __init__(self, model, optimizer) -> None:
        self.actv, self.actv_grad, self.grads, self.exp_avg, self.exp_avg_sq = {}, {}, {}, {}, {}
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(self._forward(name))
        self.names = {p: n for n, p in model.named_parameters()}
        optimizer.register_step_pre_hook(self._before_step)
        optimizer.register_step_post_hook(self._after_step)
        self.step = 0

    def _forward(self, name):
        def hook(module, args, output):
            self.actv[(self.step, f"{name}.input")] = args[0].detach().clone()
            self.actv[(self.step, f"{name}.output")] = output.detach().clone()
            output.register_hook(lambda g: self.actv_grad.__setitem__((self.step, f"{name}.output"), g.clone()))
        return hook

    def _before_step(self, optimizer, *_):
        for p, n in self.names.items():
            self.grads[(self.step, n)] = p.grad.clone()

    def _after_step(self, optimizer, *_):
        for p, n in self.names.items():
            self.exp_avg[(self.step, n)] = optimizer.state[p]["exp_avg"].clone()
            self.exp_avg_sq[(self.step, n)] = optimizer.state[p]["exp_avg_sq"].clone()
        self.step += 1


def _check(rows: list[dict], captured: dict) -> int:
    checked = 0
    for row in rows:
        key = (int(row["step"]), row["name"])
        if key in captured:
            assert_close_to_reference(row, captured[key].double().numpy())
            checked += 1
    return checked


@pytest.mark.parametrize("ops", [EVERYTHING["ops"], None], ids=["six-ops", "default-norm"])
def test_metrics_equal_float64_numpy(tmp_path, monkeypatch, ops):
    """Every op, and the default op alone (norm: the step's norms queued as they come, stacked once)."""
    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    keys = {**EVERYTHING, "ops": ops} if ops else {k: v for k, v in EVERYTHING.items() if k != "ops"}
    mon = TrainerMon(str(write_config(tmp_path / "c.json", **keys)), params_have_main_grad=False)
    mon.set_monitor(model, optimizer)
    capture = Capture(model, optimizer)
    for (ids,) in batches(2):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    run = only_run_dir(tmp_path / "out")
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert _check(read_rows(run, "actv"), capture.actv) == 2 * 2 * linears
    assert _check(read_rows(run, "actv_grad"), capture.actv_grad) == 2 * linears
    params = len(capture.names)
    for group, captured in (("grad_reduced", capture.grads), ("grad_unreduced", capture.grads),
                            ("exp_avg", capture.exp_avg), ("exp_avg_sq", capture.exp_avg_sq)):
        assert _check(read_rows(run, group), captured) == 2 * params, group
    # the trend database holds the same values as the CSV, unrounded
    db = sqlite3.connect(run / "monitor.db")
    (norm,) = db.execute("SELECT value FROM metrics WHERE metric='grad_reduced.norm' AND step=1 AND "
                         "target='lm_head.weight'").fetchone()
    assert norm == pytest.approx(np.linalg.norm(capture.grads[(1, "lm_head.weight")].double().numpy()), rel=1e-6)
    assert db.execute("SELECT DISTINCT rank FROM metrics").fetchall() == [(0,)]


def test_training_is_bit_identical_with_the_monitor_on(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    bare_model, watched_model = llama(), llama()
    bare, _ = train(bare_model, 3)
    watched, mon = train(watched_model, 3, write_config(tmp_path / "c.json", **EVERYTHING))
    assert [loss.item() for loss in watched] == [loss.item() for loss in bare]
    assert params_bytes(watched_model) == params_bytes(bare_model)
    assert len(read_rows(only_run_dir(tmp_path / "out"), "actv")) > 0


UPSTREAM_HEADERS = {  # upstream 26.2.0's columns, read from its files on a tiny model
    "actv": ["vpp_stage", "name", "step", "micro_step", "min", "max", "norm", "zeros", "nans", "mean", "shape",
             "dtype"],
    "grad_reduced": ["vpp_stage", "name", "step", "min", "max", "norm", "zeros", "nans", "mean", "shape", "dtype"],
}


def test_csv_files_have_upstream_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = {**EVERYTHING, "format": "csv", "step_count_per_record": 1}  # upstream's default: a file per step
    train(llama(layers=1), 2, write_config(tmp_path / "c.json", **config))
    run = only_run_dir(tmp_path / "out")
    assert run.name.split("-")[-2] == "rank0"
    names = sorted(p.name for p in run.iterdir())
    groups = ("actv", "actv_grad", "exp_avg", "exp_avg_sq", "grad_reduced", "grad_unreduced", "param_origin",
              "param_updated")
    assert names == sorted(f"{g}_{s}-{s}.csv" for g in groups for s in (0, 1))
    for group, header in UPSTREAM_HEADERS.items():
        assert (run / f"{group}_1-1.csv").read_text().splitlines()[0] == ",".join(header)
    shapes = {row["name"]: row["shape"] for row in read_rows(run, "grad_reduced")}
    assert shapes["lm_head.weight"] == "[96, 32]"


def test_tensorboard_reads_the_event_files(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the optional extra msprobe-pytorch[monitor-tb] is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = {**EVERYTHING, "format": ["tensorboard", "csv"]}
    train(llama(layers=1), 3, write_config(tmp_path / "c.json", **config))
    run = only_run_dir(tmp_path / "out")
    events = EventAccumulator(str(run))
    events.Reload()
    scalars = events.Scalars("grad_reduced_norm/lm_head.weight")
    csv_norms = [row["norm"] for row in read_rows(run, "grad_reduced") if row["name"] == "lm_head.weight"]
    assert [s.step for s in scalars] == [0, 1, 2]
    assert [s.value for s in scalars] == pytest.approx(csv_norms, rel=1e-5)
    assert "actv_max/model.norm.output:0" in events.Tags()["scalars"]


def _open_files_under(directory) -> list[str]:
    """The files this process holds open below ``directory`` (Linux: /proc/self/fd)."""
    fds = Path("/proc/self/fd")
    targets = []
    for fd in fds.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:  # the listing's own descriptor, already closed
            continue
    return [t for t in targets if t.startswith(str(directory))]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.parametrize("collect_times", [2, None])
def test_the_files_are_closed_after_the_last_step_to_collect_or_when_the_monitor_is_dropped(
        tmp_path, monkeypatch, collect_times):
    """TrainerMon has no close(): after ``collect_times`` steps, or when it is garbage-collected, nothing
    under its output directory stays open (CSV, SQLite and its WAL files)."""
    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    keys = {"collect_times": collect_times} if collect_times else {}
    mon = TrainerMon(str(write_config(tmp_path / "c.json", **keys, **EVERYTHING)), params_have_main_grad=False)
    mon.set_monitor(model, optimizer)
    for (ids,) in batches(3):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if collect_times is None:
        assert _open_files_under(tmp_path / "out")  # still collecting: the step's files are open
        del mon, model, optimizer
        with warnings.catch_warnings(record=True) as caught:  # closed by the monitor, not by CPython's __del__
            warnings.simplefilter("always", ResourceWarning)
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert _open_files_under(tmp_path / "out") == []
    assert len(read_rows(only_run_dir(tmp_path / "out"), "actv")) > 0


def test_an_output_the_next_module_changes_in_place_keeps_each_gradient_where_it_was_seen(tmp_path, monkeypatch):
    """``nn.ReLU(inplace=True)`` after a Linear (as torchvision's ResNets chain them): the Linear's output row
    has the gradient of the value before the ReLU, the ReLU's input and output rows that of the value after
    it, as tensor hooks put on at those moments would (float64 reference of the same step, out of place)."""
    from torch import nn

    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True), nn.Linear(16, 3))
    x, target = torch.randn(8, 6), torch.randn(8, 3)
    first, last = model[0].double(), model[2].double()  # the reference: the same weights in float64
    before = torch.nn.functional.linear(x.double(), first.weight, first.bias)
    after = torch.relu(before)
    loss = torch.nn.functional.mse_loss(torch.nn.functional.linear(after, last.weight, last.bias), target.double())
    grad_before, grad_after = (g.detach().numpy() for g in torch.autograd.grad(loss, [before, after]))
    model.float()
    assert not np.allclose(grad_before, grad_after)  # the ReLU zeroes some: the two gradients differ

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = write_config(tmp_path / "c.json", xy_distribution=True, ops=["norm", "min", "max"])
    TrainerMon(str(config), params_have_main_grad=False).set_monitor(model, optimizer)
    torch.nn.functional.mse_loss(model(x), target).backward()
    optimizer.step()
    rows = {r["name"]: r for r in read_rows(only_run_dir(tmp_path / "out"), "actv_grad")}
    assert_close_to_reference(rows["0.output"], grad_before)
    assert_close_to_reference(rows["1.input"], grad_after)
    assert_close_to_reference(rows["1.output"], grad_after)
