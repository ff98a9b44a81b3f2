"""Writes a statistics dump (level L0: modules only, the level at which both tools record the same entries) of one training step of a small GPT-2 with msprobe 26.2.0.

Run once, in a separate venv holding mindstudio-probe 26.2.0, torch 2.13.0 CPU and transformers 5.23.0
(the versions of the project's dev requirements, so that ``build()`` gives the same weights in both venvs):

    python make_up262_gpt2.py OUT          # then copy OUT/step0/proc*/ here as step0/proc0/

The tests import ``build()`` (in the project's venv) to dump the same model with msprobe and compare the two
dumps. msprobe is imported only in ``main()``, so the import needs no msprobe at all.
"""

import json
import os
import sys

import torch

CONFIG = {"vocab_size": 64, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 2, "resid_pdrop": 0.0,
          "embd_pdrop": 0.0, "attn_pdrop": 0.0}
DUMP_CONFIG = {"task": "statistics", "rank": [], "step": [], "level": "L0",
               "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}


def build():
    """The model (random weights from seed 0, GPT-2's own initialisation) and its input ids."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**CONFIG, attn_implementation="eager"))
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(1))
    return model, ids


def train_step(model, ids) -> torch.Tensor:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss


def main(out: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    config_path = os.path.join(out, "config.json")
    os.makedirs(out, exist_ok=True)
    with open(config_path, "w") as handle:
        json.dump({**DUMP_CONFIG, "dump_path": out}, handle)
    model, ids = build()
    debugger = PrecisionDebugger(config_path=config_path)
    debugger.start(model=model)
    train_step(model, ids)
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main(sys.argv[1])
