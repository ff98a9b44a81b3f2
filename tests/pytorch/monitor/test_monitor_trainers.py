"""TrainerMon through the trainer callbacks (docs/monitor.md, docs/pytorch/trainers.md): the Hugging Face
Trainer's and Lightning's ``MonitorCallback`` hook the trainer's model and optimizer, count its
micro-batches, and leave its numbers bit for bit as without them. The trainings are test_integrations'."""

from __future__ import annotations

import pytest
from monitor_models import write_config
from monitor_reference import only_run_dir, read_rows
from test_integrations import ACCUMULATE, _hf_train, _lightning_train, assert_same_parameters

from msprobe.core.config.errors import ConfigError

CONFIG = dict(xy_distribution=True, wg_distribution=True, mv_distribution=True)


def _micro_steps(run, name: str) -> list[tuple[int, int]]:
    return [(int(r["step"]), int(r["micro_step"])) for r in read_rows(run, "actv") if r["name"] == name]


@pytest.mark.slow
def test_transformers_trainer_monitor_callback(tmp_path, monkeypatch):
    from msprobe.pytorch.integrations.transformers import MonitorCallback

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "monitor"))
    plain_losses, plain_model, _ = _hf_train(tmp_path / "plain", [])
    callback = MonitorCallback(str(write_config(tmp_path / "c.json", **CONFIG)))
    losses, model, _ = _hf_train(tmp_path / "watched", [callback])
    assert losses == plain_losses
    assert_same_parameters(model, plain_model)
    run = only_run_dir(tmp_path / "monitor")
    assert _micro_steps(run, "model.norm.output") == [(s, m) for s in range(3) for m in range(ACCUMULATE)]
    assert {int(r["step"]) for r in read_rows(run, "exp_avg")} == {0, 1, 2}


@pytest.mark.slow
def test_lightning_monitor_callback(tmp_path, monkeypatch):
    from msprobe.pytorch.integrations.lightning import MonitorCallback

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "monitor"))
    plain_losses, plain_module = _lightning_train([])
    losses, module = _lightning_train([MonitorCallback(str(write_config(tmp_path / "c.json", **CONFIG)))])
    assert losses == plain_losses
    assert_same_parameters(module, plain_module)
    run = only_run_dir(tmp_path / "monitor")
    assert _micro_steps(run, "net.0.output") == [(s, m) for s in range(3) for m in range(ACCUMULATE)]
    assert {int(r["step"]) for r in read_rows(run, "grad_reduced")} == {0, 1, 2}


def test_monitor_callbacks_check_the_file_at_construction(tmp_path):
    from msprobe.pytorch.integrations.lightning import MonitorCallback as LightningMonitor
    from msprobe.pytorch.integrations.transformers import MonitorCallback

    bad = write_config(tmp_path / "bad.json", format="parquet")
    for callback in (MonitorCallback, LightningMonitor):
        with pytest.raises(ConfigError, match="format: got 'parquet'"):
            callback(str(bad))
