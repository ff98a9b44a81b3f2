"""Which framework sides the contracts run against, and loading one (skipped when its framework is
not installed, so msprobe-common alone still runs the numpy side)."""

from __future__ import annotations

import importlib

import pytest

FRAMEWORKS = {"numpy": (), "pytorch": ("torch", "msprobe.pytorch"), "mindspore": ("mindspore", "msprobe.mindspore")}
NOT_TRAINED = "the numpy framework has no autograd or optimizer: there is no training run to observe"


def load_side(name: str):
    for module in FRAMEWORKS[name]:
        pytest.importorskip(module)
    return importlib.import_module(f"side_{name}")
