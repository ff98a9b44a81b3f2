"""Dynamic on/off without a restart: the config file is re-read when it changes; upstream's
DYNAMIC_MONITOR starts monitoring off until the file says ``dynamic_on``; switching off (or running out
of ``collect_times``) removes every module hook."""

from __future__ import annotations

import json
import os

import pytest
import torch
from monitor_models import batches, llama, params_bytes, train, write_config
from monitor_reference import only_run_dir, read_rows

from msprobe.core.config.errors import ConfigError


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) + sum(
        len(p._post_accumulate_grad_hooks or {}) for p in model.parameters())


def _rewrite(path, mtime_ns: int, **keys) -> None:
    path.write_text(json.dumps(keys))
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a distinct modification time, whatever the clock's resolution


def test_dynamic_monitor_follows_the_file(tmp_path, monkeypatch):
    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    config = write_config(tmp_path / "c.json", xy_distribution=True, dynamic_on=False)
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = TrainerMon(str(config), params_have_main_grad=False)
    mon.set_monitor(model, optimizer)
    seen = []
    for step, (ids,) in enumerate(batches(7)):
        if step == 2:
            _rewrite(config, 10**18, xy_distribution=True, dynamic_on=True, collect_times=2)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seen.append((mon.monitoring, _hooks(model) > 0))
    # read at the end of step 2: steps 3 and 4 collected, then every hook removed
    assert seen == [(False, False)] * 2 + [(True, True)] * 2 + [(False, False)] * 3
    assert sorted({int(r["step"]) for r in read_rows(only_run_dir(tmp_path / "out"), "actv")}) == [3, 4]


def test_a_changed_file_turns_monitoring_off_and_a_bad_one_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = write_config(tmp_path / "c.json", xy_distribution=True, wg_distribution=True)
    bare_model, model = llama(), llama()

    def edit(step, _model):
        if step == 2:
            _rewrite(config, 10**18, step_interval="two")  # invalid: logged, the old configuration stays
        if step == 4:
            _rewrite(config, 2 * 10**18, xy_distribution=True, dynamic_on=False)

    losses, mon = train(model, 6, config, before_step=edit)
    bare, _ = train(bare_model, 6)
    assert [x.item() for x in losses] == [x.item() for x in bare] and params_bytes(model) == params_bytes(bare_model)
    assert not mon.monitoring and _hooks(model) == 0
    steps = {int(r["step"]) for r in read_rows(only_run_dir(tmp_path / "out"), "actv")}
    assert sorted(steps) == [0, 1, 2, 3, 4]  # the edit made during step 4 is read when step 4 ends


def test_bad_dynamic_monitor_value(tmp_path, monkeypatch):
    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("DYNAMIC_MONITOR", "yes")
    with pytest.raises(ConfigError, match="DYNAMIC_MONITOR: got 'yes'; allowed: 'true' or 'false'"):
        TrainerMon(str(write_config(tmp_path / "c.json")))
