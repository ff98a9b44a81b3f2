"""Small real models and a training loop shared by the PyTorch end-to-end tests."""

from __future__ import annotations

import torch
from torch import nn


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(h).flatten(1))

    @staticmethod
    def batch(gen: torch.Generator):
        return torch.randn(4, 1, 6, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen)


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(6, 8, batch_first=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])

    @staticmethod
    def batch(gen: torch.Generator):
        return torch.randn(3, 5, 6, generator=gen), torch.randint(0, 5, (3,), generator=gen)


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.layer(self.embed(x)).mean(1))

    @staticmethod
    def batch(gen: torch.Generator):
        return torch.randint(0, 20, (3, 7), generator=gen), torch.randint(0, 5, (3,), generator=gen)


def train_steps(model, optimizer, next_batch, loss_of, debugger=None, steps: int = 3, autocast=None,
                after_step=None):
    """The training loop every end-to-end test runs; each step framed by ``start``/``stop``/``step`` as
    the docs show, the optimizer step inside the frame; ``after_step(n)`` runs after step n (a test's edit
    between steps). Returns (losses, parameters, last gradients)."""
    losses = []
    for _ in range(steps):
        batch = next_batch()
        if debugger is not None:
            debugger.start(model)
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = loss_of(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.detach().clone())
        if after_step is not None:
            after_step(len(losses) - 1)
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    params = [p.detach().clone() for p in model.parameters()]
    return losses, params, grads


def train(model_cls, debugger=None, steps: int = 3, seed: int = 0):
    """Train ``steps`` SGD steps of one of the models above."""
    torch.manual_seed(seed)
    model = model_cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + 1)

    def loss_of(model, batch):
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    return train_steps(model, optimizer, lambda: model_cls.batch(gen), loss_of, debugger, steps)


def dump_one_step(model, loss_of, out, *, task: str, level: str, autocast=None, fault: str | None = None,
                  optimizer=None, config_path=None):
    """One step of ``model`` dumped by PrecisionDebugger into ``out`` (step 0 only): ``loss_of(model)``
    under ``autocast`` (a dtype, or None for none), backward, and ``optimizer``'s step when given.
    ``fault``: the submodule whose weight is scaled by 1.05 first — the injected error the first-divergence
    tests look for. ``config_path``: a config.json for the rest of the settings (its ``list``...).
    Returns the step's rank directory."""
    from msprobe.pytorch import PrecisionDebugger

    if fault is not None:
        with torch.no_grad():
            model.get_submodule(fault).weight.mul_(1.05)
    debugger = PrecisionDebugger(config_path=config_path, dump_path=str(out), task=task, level=level, step=[0])
    debugger.start(model)
    with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
        loss = loss_of(model)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    debugger.stop()
    debugger.step()
    debugger.finish()
    return out / "step0" / "rank"
