"""The adapter contract is stated once and run against every framework's side (``side_*.py``): a param
whose framework is not installed skips, so msprobe-common alone still runs the numpy side."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent / "common")]  # the sides, the numpy "framework" (importlib mode)

FRAMEWORKS = {"numpy": (), "pytorch": ("torch", "msprobe.pytorch"), "mindspore": ("mindspore", "msprobe.mindspore")}


def load_side(name: str):
    for module in FRAMEWORKS[name]:
        pytest.importorskip(module)
    return importlib.import_module(f"side_{name}")


@pytest.fixture(params=list(FRAMEWORKS))
def side(request):
    """One framework's half of the contract: its adapter and how to make and read its tensors."""
    return load_side(request.param)
