"""A tiny LLaMA trained a few AdamW steps with or without TrainerMon: the real model of the monitor tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def llama(seed: int = 0, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager", use_cache=False,
    ))
    model.train()
    return model


def batches(steps: int, micro: int = 1):
    gen = torch.Generator().manual_seed(1)
    return [[torch.randint(0, 96, (2, 12), generator=gen) for _ in range(micro)] for _ in range(steps)]


def write_config(path: Path, **keys) -> Path:
    path.write_text(json.dumps(keys))
    return path


def train(model, steps: int, monitor_config: Path | None = None, micro: int = 1, before_step=None):
    """Losses of ``steps`` AdamW steps of ``micro`` micro-batches each; TrainerMon on when a config is given."""
    from msprobe.pytorch import TrainerMon

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = None
    if monitor_config is not None:
        mon = TrainerMon(str(monitor_config), params_have_main_grad=False)
        mon.set_monitor(model, optimizer, grad_acc_steps=micro)
    losses = []
    for step, micro_batches in enumerate(batches(steps, micro)):
        if before_step:
            before_step(step, model)
        for ids in micro_batches:
            loss = model(input_ids=ids, labels=ids).loss / micro
            loss.backward()
            losses.append(loss.detach().clone())
        optimizer.step()
        optimizer.zero_grad()
    return losses, mon


def params_bytes(model) -> list[bytes]:
    return [p.detach().numpy().tobytes() for p in model.parameters()]
