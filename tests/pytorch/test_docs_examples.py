"""The runnable examples of the README and of docs/pytorch/dump.md run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", ["README.md", "docs/pytorch/dump.md"])
def test_first_python_example_runs(tmp_path, doc):
    code = python_blocks(ROOT / doc)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    dumps = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("dump.json"))
    assert dumps == ["dump/step0/rank/dump.json", "dump/step1/rank/dump.json"]
    assert "has finished" in result.stderr
