"""The debugger must not change the numbers of the run: losses, gradients and parameters are bit
for bit the same with the debugger on (every level and task) as with it off."""

from __future__ import annotations

import pytest
import torch
from torch_models import ConvBN, GRUNet, TinyTransformer, train

from msprobe.pytorch import PrecisionDebugger

CASES = [
    ("statistics", "L1"), ("statistics", "L0"), ("statistics", "mix"), ("tensor", "mix"),
]



def _eval_without_dropout(model_cls):
    """Dropout is set to 0 while dumping (SPEC 4), so the reference run has it at 0 as well."""

    class NoDropout(model_cls):
        def __init__(self) -> None:
            super().__init__()
            for module in self.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0

    NoDropout.__name__ = model_cls.__name__
    return NoDropout


@pytest.mark.parametrize("model_cls", [ConvBN, GRUNet, TinyTransformer], ids=lambda c: c.__name__)
@pytest.mark.parametrize("task,level", CASES, ids=lambda v: str(v))
def test_training_is_bit_identical_with_the_debugger(tmp_path, model_cls, task, level):
    reference = train(_eval_without_dropout(model_cls))
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level=level)
    observed = train(model_cls, debugger)
    for expected, actual in zip(reference, observed):
        assert len(expected) == len(actual)
        for a, b in zip(expected, actual):
            assert torch.equal(a, b)
    assert (tmp_path / "dump" / "step2" / "rank" / "dump.json").is_file()


def test_md5_summary_leaves_numbers_unchanged(tmp_path):
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / "d"), "level": "L1",
        "statistics": {"summary_mode": "md5"},
    }))
    reference = train(_eval_without_dropout(ConvBN))
    observed = train(ConvBN, PrecisionDebugger(config_path=str(config)))
    assert all(torch.equal(a, b) for a, b in zip(reference[1], observed[1]))
