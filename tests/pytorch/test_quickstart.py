"""``make demo`` (examples/quickstart.py) tells the story the docs tell: bf16 rounding is not named as a
divergence, a 5% fault in fc1 is named at fc1's linear, and the API pre-check of the bf16 dump fails
nothing but a deliberately wrong gelu."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"

pytestmark = pytest.mark.slow


def test_the_demo_names_the_fault_and_not_the_rounding(tmp_path, capsys):
    main = runpy.run_path(str(QUICKSTART))["main"]
    assert main(["--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("bf16 autocast (NPU side) vs fp32") and line.endswith("bf16 rounding")
               for line in lines)
    assert any(line.startswith("bf16 with a 5% fc1 fault vs fp32") and line.endswith("Functional.linear.0.forward")
               for line in lines)
    # the pre-check (run_ut) of the bf16 dump: no API fails; a wrong gelu kernel is named
    assert any(line.startswith("pre-check of the bf16 dump:") and "failing (error): none;" in line for line in lines)
    assert any(line.startswith("pre-check with a wrong gelu kernel:")
               and "failing (error): Functional.gelu.0 (forward error, backward error);" in line for line in lines)
