"""docs/monitor.md's example runs as written and writes the files the page names."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_monitor_doc_example_runs(tmp_path):
    code = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "monitor.md").read_text(), flags=re.S)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = (tmp_path / "monitor_output").iterdir()
    assert {"actv_0-99.csv", "actv_grad_0-99.csv", "grad_reduced_0-99.csv", "grad_unreduced_0-99.csv",
            "monitor.db"} <= {p.name for p in run.iterdir()}
    steps = sqlite3.connect(run / "monitor.db").execute("SELECT DISTINCT step FROM metrics ORDER BY step").fetchall()
    assert steps == [(s,) for s in range(5)]
