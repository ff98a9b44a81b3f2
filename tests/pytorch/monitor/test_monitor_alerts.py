"""Alerts that point somewhere: a weight scaled 100× at step N of a real transformers model raises an alert
at step N naming that layer first; the clean models raise none over 20 steps."""

from __future__ import annotations

import json

import pytest
import torch
from monitor_models import llama, train, write_config
from monitor_reference import only_run_dir

DEFAULT = dict(xy_distribution=True, wg_distribution=True)
SPIKE_STEP, LAYER = 12, "model.layers.1.mlp.down_proj"


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4))
    model.train()
    return model


def _anomalies(tmp_path):
    path = only_run_dir(tmp_path / "out") / "anomalies.json"
    return json.loads(path.read_text()) if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("build", [llama, _gpt2], ids=["llama", "gpt2"])
def test_clean_models_raise_no_alert_in_20_steps(tmp_path, monkeypatch, build):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    train(build(), 20, write_config(tmp_path / "c.json", **DEFAULT))
    assert _anomalies(tmp_path) == []


@pytest.mark.slow
def test_planted_spike_alerts_at_its_step_naming_the_layer_first(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))

    def plant(step, model):
        if step == SPIKE_STEP:
            with torch.no_grad():
                model.get_submodule(LAYER).weight.mul_(100)

    with caplog.at_level("WARNING", logger="msprobe"):
        train(llama(), SPIKE_STEP + 1, write_config(tmp_path / "c.json", **DEFAULT), before_step=plant)
    (alert,) = _anomalies(tmp_path)
    assert alert["step"] == SPIKE_STEP and alert["rank"] == 0
    assert alert["first"]["group"] == "actv" and alert["first"]["name"] == f"{LAYER}.output"
    assert alert["first"]["value"] > 10 * alert["first"]["history_mean"]
    assert f"first jump in actv {LAYER}.output" in caplog.text


@pytest.mark.slow
def test_alert_dump_arms_a_statistics_mix_dump_of_the_next_step(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))

    def plant(step, model):
        if step == 4:
            with torch.no_grad():
                model.get_submodule(LAYER).weight.mul_(100)

    config = {**DEFAULT, "alert": {"dump": True}}
    train(llama(), 7, write_config(tmp_path / "c.json", **config), before_step=plant)
    assert [a["step"] for a in _anomalies(tmp_path)] == [4]
    (dump_json,) = (only_run_dir(tmp_path / "out") / "alert_dump").glob("step5/step0/rank/dump.json")
    data = json.loads(dump_json.read_text())["data"]
    assert any(key.startswith("Module.") for key in data) and any(key.startswith("Torch.") for key in data)
