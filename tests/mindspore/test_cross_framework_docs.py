"""The porting example of docs/cross_framework_compare.md runs as written and finds the porting error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_porting_example_runs_and_names_the_bug(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "cross_framework_compare.md").read_text(), re.S)
    code = next(block for block in blocks if "class MsNet" in block)
    (tmp_path / "ex.py").write_text(code)
    result = subprocess.run([sys.executable, "ex.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("first divergence: Mint.softmax.0.forward (called with different arguments: dim 0 vs -1; its tensor "
            "inputs pass") in result.stderr  # the port's own call differs (docs/compare.md)
    rows = [line.split() for line in result.stdout.splitlines()]
    pairs = {row[0]: row[1] for row in rows if row[0] != "-"}
    assert pairs["MintFunctional.relu.0.forward.output.0"] == "Torch.relu.0.forward.output.0"
    assert pairs["Primitive.dense.Dense.1.forward.output.0"] == "Functional.linear.1.forward.output.0"
    assert pairs["Cell.fc2.Linear.forward.0.output.0"] == "Module.fc2.Linear.forward.0.output.0"
    assert all(row[1] != "-" for row in rows)  # every MindSpore row has its PyTorch partner
    assert list((tmp_path / "out").glob("compare_result_*.html"))
