"""TrainerMon on transformers' MoE models (Mixtral, OLMoE built from small configs): each expert's load and the
statistics of the tokens routed to it equal float64 numpy of the same routing, read independently from the
router's output; the run is bit for bit the one without the monitor, whichever experts kernel runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monitor_models import batches, params_bytes, train, write_config
from monitor_reference import assert_close_to_reference, only_run_dir, read_rows

EXPERTS, TOP_K = 4, 2
CONFIG = dict(moe_distribution=True, wg_distribution=True, ops=["min", "max", "norm", "mean", "zeros", "nans"])


def moe_model(kind: str, kernel: str):
    import transformers

    common = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, num_experts_per_tok=TOP_K, max_position_embeddings=64,
                  attn_implementation="eager", use_cache=False)
    torch.manual_seed(0)
    if kind == "mixtral":
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(num_local_experts=EXPERTS, **common))
    else:
        model = transformers.OlmoeForCausalLM(transformers.OlmoeConfig(num_experts=EXPERTS, **common))
    model.set_experts_implementation(kernel)
    model.train()
    return model


class RoutingCapture:
    """The tokens each router saw and the experts it picked, from the test's own hook on the router."""

    def __init__(self, model) -> None:
        self.seen: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        self.logits: dict[tuple[int, str], np.ndarray] = {}  # (step, router) -> its logits, in float64
        self.expert_grads: dict[tuple[int, str], np.ndarray] = {}  # (step, 3-D experts weight) -> its gradient
        self.step = 0
        self.experts_weights = {n: p for n, p in model.named_parameters() if ".experts." in n}
        for name, module in model.named_modules():
            if name.endswith("mlp.gate"):
                module.register_forward_hook(self._hook(name.removesuffix(".gate") + ".experts"))

    def before_step(self, *_) -> None:
        for name, param in self.experts_weights.items():
            self.expert_grads[(self.step, name)] = param.grad.double().numpy()

    def _hook(self, experts_name: str):
        def hook(module, args, output):
            indices = output[-1]
            hidden = args[0].detach().double().numpy()
            self.seen[(self.step, experts_name)] = (hidden, indices.numpy())
            router = experts_name.removesuffix(".experts") + ".gate"
            self.logits[(self.step, router)] = hidden @ module.weight.detach().double().numpy().T
        return hook


def _train(model, steps: int, config=None):
    from msprobe.pytorch import TrainerMon

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    capture = RoutingCapture(model) if config else None
    if config:
        TrainerMon(str(config), params_have_main_grad=False).set_monitor(model, optimizer)
        optimizer.register_step_pre_hook(capture.before_step)
        optimizer.register_step_post_hook(lambda *_: setattr(capture, "step", capture.step + 1))
    losses = []
    for (ids,) in batches(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
    return losses, capture


@pytest.mark.parametrize("kind,kernel", [("mixtral", "grouped_mm"), ("mixtral", "eager"), ("olmoe", "grouped_mm")])
def test_expert_load_and_inputs_equal_float64_numpy(tmp_path, monkeypatch, kind, kernel):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    bare_model, model = moe_model(kind, kernel), moe_model(kind, kernel)
    bare, _ = _train(bare_model, 3)
    losses, capture = _train(model, 3, write_config(tmp_path / "c.json", **CONFIG))
    assert losses == bare and params_bytes(model) == params_bytes(bare_model)

    run = only_run_dir(tmp_path / "out")
    load = {(int(r["step"]), r["name"]): r for r in read_rows(run, "expert_load")}
    inputs = {(int(r["step"]), r["name"]): r for r in read_rows(run, "actv")}
    assert len(capture.seen) == 3 * 2 and len(load) == len(inputs) == 3 * 2 * EXPERTS
    for (step, experts_name), (hidden, picks) in capture.seen.items():
        assert hidden.shape[0] == picks.shape[0] and picks.shape[1] == TOP_K
        for expert in range(EXPERTS):
            routed = (picks == expert).any(axis=1)
            row = load[(step, f"{experts_name}.expert_{expert}")]
            count = float(np.count_nonzero(routed))
            assert row["norm"] == row["max"] == row["mean"] == count and row["zeros"] == float(count == 0)
            if count:
                assert_close_to_reference(inputs[(step, f"{experts_name}.expert_{expert}.input")], hidden[routed])
        total = sum(load[(step, f"{experts_name}.expert_{e}")]["norm"] for e in range(EXPERTS))
        assert total == hidden.shape[0] * TOP_K  # every token went to top_k experts
    entropy = {(int(r["step"]), r["name"]): r for r in read_rows(run, "router_entropy")}
    assert entropy.keys() == capture.logits.keys() and len(entropy) == 3 * 2
    for key, logits in capture.logits.items():  # each token's -sum(p log p), p = softmax(logits)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        assert_close_to_reference(entropy[key], -(p * np.log(p)).sum(axis=1))
    grads = {(int(r["step"]), r["name"]): r for r in read_rows(run, "grad_reduced")}
    assert len(capture.expert_grads) == 3 * 2 * 2  # steps, layers, gate_up_proj and down_proj
    for (step, weight), grad in capture.expert_grads.items():
        assert_close_to_reference(grads[(step, weight)], grad)
        for expert in range(EXPERTS):
            assert_close_to_reference(grads[(step, f"{weight}.expert_{expert}")], grad[expert])


def test_experts_are_found_under_the_targets_only(tmp_path, monkeypatch):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = moe_model("mixtral", "grouped_mm")
    config = write_config(tmp_path / "c.json", targets={"model.layers.1": {}}, moe_distribution=True)
    _train(model, 1, config)
    names = {r["name"] for r in read_rows(only_run_dir(tmp_path / "out"), "expert_load")}
    assert names == {f"model.layers.1.mlp.experts.expert_{e}" for e in range(EXPERTS)}


@pytest.mark.parametrize("checkpointed", [False, True])
def test_expert_load_per_micro_step_counted_once(tmp_path, monkeypatch, checkpointed):
    """Two micro-batches a step, with and without activation checkpointing: one load row per expert and
    micro-step (a forward recomputed in the backward pass is not counted again), each micro-batch's loads
    adding up to its tokens × top-k."""
    import warnings

    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    model = moe_model("mixtral", "grouped_mm")
    if checkpointed:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    train(model, 2, write_config(tmp_path / "c.json", moe_distribution=True), micro=2)
    rows = read_rows(only_run_dir(tmp_path / "out"), "expert_load")
    keys = [(r["step"], r["micro_step"], r["name"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2 * EXPERTS  # steps, micro-steps, layers, experts
    for step, micro in ((s, m) for s in "01" for m in "01"):
        layer0 = [r["norm"] for r in rows if (r["step"], r["micro_step"]) == (step, micro)
                  and r["name"].startswith("model.layers.0.")]
        assert sum(layer0) == 2 * 12 * TOP_K  # a micro-batch of 2 sequences of 12 tokens
