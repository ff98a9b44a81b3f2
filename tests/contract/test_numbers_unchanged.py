"""Training with the debugger on is bit for bit training without it: the losses, the last gradients and
the parameters, at every level and task that dumps (docs/pytorch/dump.md,
docs/mindspore/dump.md#backward-entries). Each framework trains its own models (the sides build them)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from sides import NOT_TRAINED, load_side
from training import debugger, run

EVERY_LEVEL = ("statistics-L0", "statistics-L1", "statistics-mix", "tensor-mix")
MODELS = {  # framework → model → the modes it trains under (md5, xor differ from statistics by a checksum: once)
    "pytorch": {"ConvBN": (*EVERY_LEVEL, "md5-L1", "xor-mix"), "GRUNet": EVERY_LEVEL, "TinyTransformer": EVERY_LEVEL},
    "mindspore": {"reads_twice": (*EVERY_LEVEL, "md5-L1", "xor-mix"), "llama_block": EVERY_LEVEL,  # mindcv: a library
                  "mindcv_vit": ("statistics-L0", "statistics-mix"), "mindcv_resnet": ("statistics-mix",)},
}
CASES = [pytest.param(framework, name, mode, id=f"{framework}-{name}-{mode}")
         for framework, models in MODELS.items() for name, modes in models.items() for mode in modes]
CASES.append(pytest.param("numpy", None, None, id="numpy", marks=pytest.mark.skip(reason=NOT_TRAINED)))
STEPS = 2


@functools.cache
def _plain(framework: str, name: str) -> tuple:
    side = load_side(framework)
    training = side.training(name, observed=False)
    losses = run(training, None, STEPS)
    return tuple([side.host(loss) for loss in losses] + training.state())


@pytest.mark.parametrize(("framework", "name", "mode"), CASES)
def test_training_is_bit_identical_with_the_debugger(framework, name, mode, tmp_path):
    side = load_side(framework)
    plain = _plain(framework, name)
    training = side.training(name)
    losses = run(training, debugger(side, mode, tmp_path / "dump"), STEPS)
    observed = [side.host(loss) for loss in losses] + training.state()
    assert len(plain) == len(observed)
    different = [i for i, (a, b) in enumerate(zip(plain, observed)) if not np.array_equal(a, b)]
    assert not different, f"{len(different)} of {len(plain)} arrays differ (losses, gradients, parameters)"
    dump = tmp_path / "dump" / f"step{STEPS - 1}" / "rank" / "dump.json"
    assert ".backward" in dump.read_text()  # the run was observed, backward included
