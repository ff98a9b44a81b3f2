"""TrainerMon on MindSpore (PyNative, CPU): activations, weight gradients, Adam moments and parameters equal
float64 numpy on the same tensors, and training is bit for bit the same with the monitor on."""

from __future__ import annotations

import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from monitor_reference import assert_close_to_reference, only_run_dir, read_rows

from msprobe.core.config.errors import ConfigError

CONFIG = {"xy_distribution": True, "wg_distribution": True, "mv_distribution": True, "param_distribution": True,
          "ops": ["min", "max", "norm", "mean", "zeros", "nans"], "format": "csv"}


def _net():
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(6, 16), nn.ReLU(), nn.Dense(16, 3))
    net.set_train()
    return net


def _train(net, steps: int, config_path=None, capture=None):
    from msprobe.mindspore import TrainerMon

    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    if config_path is not None:
        TrainerMon(str(config_path)).set_monitor(net, optimizer)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(steps):
        x, y = (ms.Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((4, 6), (4, 3)))
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        losses.append(loss.asnumpy().tobytes())
        if capture is not None:
            # copies: asnumpy() of a parameter shares its memory, which the next update overwrites
            capture[step] = {"grads": {p.name: g.asnumpy().copy() for p, g in zip(optimizer.parameters, grads)},
                             "exp_avg": {p.name: m.asnumpy().copy()
                                         for p, m in zip(optimizer.parameters, optimizer.moment1)},
                             "param": {p.name: p.asnumpy().copy() for p in optimizer.parameters}}
    return losses, [p.asnumpy().tobytes() for p in net.trainable_params()]


def test_mindspore_metrics_equal_float64_numpy_and_training_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(CONFIG))
    bare = _train(_net(), 3)
    net, captured, activations = _net(), {}, {}

    def keep(cell, inputs, output):  # returns None: the output stays the cell's
        activations[len(activations)] = (inputs[0].asnumpy().copy(), output.asnumpy().copy())

    net[2].register_forward_hook(keep)
    watched = _train(net, 3, config, captured)
    assert watched == bare
    run = only_run_dir(tmp_path / "out")
    for group, key in (("grad_reduced", "grads"), ("grad_unreduced", "grads"), ("exp_avg", "exp_avg"),
                       ("param_updated", "param")):
        rows = read_rows(run, group)
        assert len(rows) == 3 * 4, group
        for row in rows:
            assert_close_to_reference(row, captured[int(row["step"])][key][row["name"]])
    rows = {(int(r["step"]), r["name"]): r for r in read_rows(run, "actv")}
    for step, (inputs, output) in activations.items():
        assert_close_to_reference(rows[(step, "2.input")], inputs)
        assert_close_to_reference(rows[(step, "2.output")], output)


def _train_accumulating(net, steps: int, micro: int, config_path=None):
    """``micro`` micro-batches a step, their gradients summed before one Adam update."""
    from msprobe.mindspore import TrainerMon

    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    if config_path is not None:
        TrainerMon(str(config_path)).set_monitor(net, optimizer, grad_acc_steps=micro)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        total = None
        for _ in range(micro):
            x, y = (ms.Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((4, 6), (4, 3)))
            loss, grads = grad_fn(x, y)
            total = grads if total is None else tuple(a + b for a, b in zip(total, grads))
            losses.append(loss.asnumpy().tobytes())
        optimizer(total)
    return losses, [p.asnumpy().tobytes() for p in net.trainable_params()]


def test_mindspore_activation_gradients_per_micro_step(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(CONFIG))
    bare = _train_accumulating(_net(), 2, 2)
    net, outputs, grads = _net(), [], []

    def keep(cell, inputs, output):  # the test's own tensor hook on the same output: what reached it
        outputs.append(output.asnumpy().copy())
        output.register_hook(lambda grad: grads.append(grad.asnumpy().copy()))

    net[2].register_forward_hook(keep)
    assert _train_accumulating(net, 2, 2, config) == bare
    run = only_run_dir(tmp_path / "out")
    actv = {(int(r["step"]), int(r["micro_step"])): r for r in read_rows(run, "actv") if r["name"] == "2.output"}
    actv_grad = {(int(r["step"]), int(r["micro_step"])): r for r in read_rows(run, "actv_grad")
                 if r["name"] == "2.output"}
    keys = [(step, micro) for step in range(2) for micro in range(2)]
    assert sorted(actv) == sorted(actv_grad) == keys and len(grads) == 4
    for key, output, grad in zip(keys, outputs, grads):
        assert_close_to_reference(actv[key], output)
        assert_close_to_reference(actv_grad[key], grad)
    assert {r["name"] for r in read_rows(run, "actv_grad")} == {"0.output", "1.output", "2.output", ".output"}


def test_pytorch_only_keys_are_reported_on_mindspore(tmp_path):
    from msprobe.mindspore import TrainerMon

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"moe_distribution": True, "cc_distribution": {"enable": True}}))
    with pytest.raises(ConfigError) as caught:
        TrainerMon(str(config))
    assert [str(p).split(";")[0] for p in caught.value.problems] == ["moe_distribution: got True"]


def test_a_changed_configuration_takes_effect_on_the_hooks(tmp_path, monkeypatch):
    """The file re-read between steps (dynamic on/off): hooks put on under ``forward_only`` take no gradients;
    after the file drops it, the next steps have activation gradients."""
    import os

    from msprobe.mindspore import TrainerMon

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"xy_distribution": True, "forward_only": True, "format": "csv"}))
    net = _net()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    TrainerMon(str(config)).set_monitor(net, optimizer)
    grad_fn = ms.value_and_grad(lambda x, y: nn.MSELoss()(net(x), y), None, optimizer.parameters)
    rng = np.random.default_rng(0)
    for step in range(4):
        if step == 1:  # read again when step 1 ends
            config.write_text(json.dumps({"xy_distribution": True, "format": "csv"}))
            os.utime(config, ns=(os.stat(config).st_atime_ns, os.stat(config).st_mtime_ns + 10**9))
        x, y = (ms.Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((4, 6), (4, 3)))
        optimizer(grad_fn(x, y)[1])
    run = only_run_dir(tmp_path / "out")
    assert {int(r["step"]) for r in read_rows(run, "actv")} == {0, 1, 2, 3}
    assert {int(r["step"]) for r in read_rows(run, "actv_grad")} == {2, 3}


def test_a_list_of_tensors_is_one_measured_tensor_of_a_collective():
    """cc_distribution's tensors of a call (core's walk with MindSpore's cat): a list of float tensors is their
    elements flattened and concatenated, integer tensors and empty lists are left out."""
    from msprobe.mindspore.monitor.collectives import MindSporeCollectives

    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3), (4,))]
    alone = rng.standard_normal((3,)).astype(np.float32)
    ids = ms.Tensor(np.arange(4, dtype=np.int32))
    found = MindSporeCollectives().tensors(([ms.Tensor(p) for p in parts], ids, []), {"tensor": ms.Tensor(alone)})
    assert len(found) == 2
    np.testing.assert_array_equal(found[0].asnumpy(), np.concatenate([p.reshape(-1) for p in parts]))
    np.testing.assert_array_equal(found[1].asnumpy(), alone)
    assert MindSporeCollectives().tensors(([ids, ids],), {}) == []
