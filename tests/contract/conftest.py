"""The contracts are stated once and run against every framework's side (``side_*.py``, ``sides.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent / "common")]  # the sides, the numpy "framework" (importlib mode)

from sides import FRAMEWORKS, load_side  # noqa: E402


@pytest.fixture(params=list(FRAMEWORKS))
def side(request):
    """One framework's half of the contract: its adapter and how to make and read its tensors."""
    return load_side(request.param)
