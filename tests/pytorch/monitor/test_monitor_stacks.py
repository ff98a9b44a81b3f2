"""TrainerMon on one process's training stacks: gradient accumulation (micro-steps as upstream counts them),
activation checkpointing (a recomputed forward is not counted twice), and mistakes reported before training."""

from __future__ import annotations

import warnings

import pytest
import torch
from monitor_models import llama, params_bytes, train, write_config
from monitor_reference import only_run_dir, read_rows

from msprobe.core.config.errors import ConfigError

CONFIG = dict(xy_distribution=True, wg_distribution=True)


def _keyed(run_dir, group):
    return {(r["step"], r["name"], r["micro_step"]): r for r in read_rows(run_dir, group)}


def test_grad_accumulation_counts_micro_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    bare_model, model = llama(), llama()
    bare, _ = train(bare_model, 2, micro=3)
    losses, _ = train(model, 2, write_config(tmp_path / "c.json", **CONFIG), micro=3)
    assert [x.item() for x in losses] == [x.item() for x in bare] and params_bytes(model) == params_bytes(bare_model)
    run = only_run_dir(tmp_path / "out")
    rows = [r for r in read_rows(run, "actv") if r["name"] == "model.norm.output"]
    assert [(r["step"], r["micro_step"]) for r in rows] == [(str(s), str(m)) for s in range(2) for m in range(3)]
    assert len({r["norm"] for r in rows}) == 6  # six micro-batches, six different activations
    assert {r["step"] for r in read_rows(run, "grad_reduced")} == {"0", "1"}


@pytest.mark.slow
@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_counts_each_activation_once(tmp_path, monkeypatch, reentrant):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "plain"))
    train(llama(), 2, write_config(tmp_path / "c.json", **CONFIG))
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "checkpointed"))
    model = llama()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    train(model, 2, write_config(tmp_path / "c.json", **CONFIG))
    for group in ("actv", "actv_grad"):
        plain = _keyed(only_run_dir(tmp_path / "plain"), group)
        checkpointed = _keyed(only_run_dir(tmp_path / "checkpointed"), group)
        layer = [k for k in plain if k[1].startswith("model.layers.0.mlp")]
        assert layer and all(k in checkpointed for k in layer), group
        assert len(read_rows(only_run_dir(tmp_path / "checkpointed"), group)) == len(checkpointed)  # none twice
        for key in layer:
            assert checkpointed[key]["norm"] == pytest.approx(plain[key]["norm"], rel=1e-5), (group, key)


def test_mistakes_are_reported_before_training(tmp_path):
    from msprobe.pytorch import TrainerMon

    with pytest.raises(ConfigError, match=r"step_interval: got 0; allowed: an integer >= 1"):
        TrainerMon(str(write_config(tmp_path / "a.json", step_interval=0)))
    mon = TrainerMon(str(write_config(tmp_path / "b.json", targets={"model.layers.9": {}}, xy_distribution=True)))
    model = llama()
    with pytest.raises(ConfigError, match=r"targets\['model.layers.9'\]: got 'model.layers.9'; allowed: a module name"):
        mon.set_monitor(model, torch.optim.AdamW(model.parameters()))
    with pytest.raises(ConfigError, match=r"set_monitor.grad_acc_steps: got 0; allowed: an integer >= 1"):
        mon.set_monitor(model, torch.optim.AdamW(model.parameters()), grad_acc_steps=0)


def test_targets_limit_what_is_watched(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    train(llama(), 1, write_config(tmp_path / "c.json", targets={"model.layers.1.mlp": {}}, **CONFIG))
    run = only_run_dir(tmp_path / "out")
    assert {r["name"] for r in read_rows(run, "actv")} == {"model.layers.1.mlp.input", "model.layers.1.mlp.output"}
    assert {r["name"] for r in read_rows(run, "grad_reduced")} == {
        f"model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}


class _Sparse(torch.nn.Module):
    """Hands its input on and also returns a sparse copy, which no dense reduction accepts."""

    def forward(self, x):
        return x, x.detach().to_sparse()


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.odd, self.head = torch.nn.Linear(4, 8), _Sparse(), torch.nn.Linear(8, 1)

    def forward(self, x):
        hidden, _ = self.odd(self.fc(x))
        return self.head(hidden)


def test_an_error_while_collecting_is_logged_once_and_that_source_left_out(tmp_path, monkeypatch, caplog):
    from msprobe.pytorch import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))

    def run(monitored: bool):
        torch.manual_seed(0)
        net = _Net()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        if monitored:
            TrainerMon(str(write_config(tmp_path / "c.json", **CONFIG))).set_monitor(net, optimizer)
        for step in range(3):
            net(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        return [p.detach().clone() for p in net.parameters()]

    bare = run(False)
    with caplog.at_level("WARNING", logger="msprobe"):
        watched = run(True)
    assert all(torch.equal(a, b) for a, b in zip(bare, watched))
    assert caplog.text.count("odd left out of the metrics after an error") == 1
    names = {r["name"] for r in read_rows(only_run_dir(tmp_path / "out"), "actv")}
    assert "fc.output" in names and "head.output" in names and not any(n.startswith("odd.") for n in names)
