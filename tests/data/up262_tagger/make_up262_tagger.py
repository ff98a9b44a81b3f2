"""Writes a statistics dump (level L0) of one training step of a small LSTM tagger with msprobe 26.2.0.

The model is chosen for where 26.2.0's backward entries put their gradients: it hooks only the tensors that
require a gradient, so its gradient lists are shorter than ours and shifted, see
docs/dump_format.md#what-the-two-generations-record-differently. ``lstm`` takes and returns a ``PackedSequence``
(a named tuple: its integer fields need no gradient, the packed data is not used by the loss), ``gate`` takes a
mask that needs no gradient before the tensor that does.

Run once, in a separate venv holding mindstudio-probe 26.2.0 and torch 2.13.0 CPU:

    python make_up262_tagger.py OUT          # then copy OUT/step0/proc*/ here as step0/

The tests import ``build()`` and ``train_step()`` (in the project's venv); msprobe is imported only in ``main()``.
"""

import importlib.util
import os
import sys

import torch
from torch import nn

DUMP_CONFIG = {"task": "statistics", "rank": [], "step": [], "level": "L0",
               "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}


class Gate(nn.Module):
    def forward(self, mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x * mask


class Tagger(nn.Module):
    """An LSTM over padded sequences of different lengths, packed, then a gate and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 8, batch_first=True)
        self.gate = Gate()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (hidden, _) = self.lstm(packed)
        mask = (torch.arange(8) % 2).to(hidden.dtype)
        return self.head(self.gate(mask, hidden[-1]))


def build() -> tuple[Tagger, tuple[torch.Tensor, torch.Tensor]]:
    """The model (random weights from seed 0) and its batch: three sequences of lengths 5, 2 and 4."""
    torch.manual_seed(0)
    model = Tagger()
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(1))
    return model, (x, torch.tensor([5, 2, 4]))


def train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    loss = model(*batch).square().mean()
    loss.backward()
    return loss


def main(out: str) -> None:
    """Dumps as make_up262_gpt2.py does: its ``main()`` runs its ``build``, ``train_step`` and ``DUMP_CONFIG``."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("make_up262_gpt2", os.path.join(here, os.pardir, "up262_gpt2",
                                                                                   "make_up262_gpt2.py"))
    gpt2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt2)
    gpt2.build, gpt2.train_step, gpt2.DUMP_CONFIG = build, train_step, DUMP_CONFIG
    gpt2.main(out)


if __name__ == "__main__":
    main(sys.argv[1])
