"""cc_distribution's filters in one process (a one-rank gloo group): ``cc_codeline`` keeps the calls whose stack
matches, ``cc_log_only`` writes each op's call stacks and no statistics, and the original collectives are back
once monitoring ends. Values before and after a collective on two ranks: test_monitor_distributed.py."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from monitor_models import write_config
from monitor_reference import only_run_dir, read_rows


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _loop_with_a_loss_all_reduce(config, steps: int = 2):
    from msprobe.pytorch import TrainerMon

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(str(config), params_have_main_grad=False)
    mon.set_monitor(model, optimizer)
    for _ in range(steps):
        loss = model(torch.ones(3, 4)).square().mean()
        loss.backward()
        dist.all_reduce(loss.detach().clone())
        optimizer.step()
        optimizer.zero_grad()
    return mon


@pytest.mark.parametrize("codeline,measured", [([r"_loop_with_a_loss_all_reduce"], True), ([r"no_such_code"], False)])
def test_cc_codeline_keeps_matching_calls(tmp_path, monkeypatch, one_rank, codeline, measured):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    original = dist.all_reduce
    config = write_config(tmp_path / "c.json", collect_times=2,
                          cc_distribution={"enable": True, "cc_codeline": codeline})
    _loop_with_a_loss_all_reduce(config, steps=3)
    rows = read_rows(only_run_dir(tmp_path / "out"), "cc")
    assert [(r["name"], r["step"]) for r in rows] == ([("all_reduce.0.post", "0"), ("all_reduce.0.post", "1")]
                                                       if measured else [])
    assert dist.all_reduce is original and dist.distributed_c10d.all_reduce is original  # collect_times used up


def test_cc_log_only_writes_call_stacks(tmp_path, monkeypatch, one_rank):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    _loop_with_a_loss_all_reduce(write_config(tmp_path / "c.json", cc_distribution={"enable": True,
                                                                                    "cc_log_only": True}))
    run = only_run_dir(tmp_path / "out")
    stacks = json.loads((run / "cc_stacks.json").read_text())
    assert list(stacks) == ["all_reduce"] and len(stacks["all_reduce"]) == 1
    assert any("_loop_with_a_loss_all_reduce" in frame and __file__ in frame for frame in stacks["all_reduce"][0])
    assert not read_rows(run, "cc")
