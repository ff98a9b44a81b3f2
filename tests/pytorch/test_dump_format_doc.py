"""docs/dump_format.md's example runs as written and shows what it says: names parsed from the right, and
construct.json's parent of an API inside a module."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from msprobe.core.lifecycle.naming import parse_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_dump_format_example_runs_and_prints_the_files_contents(tmp_path):
    code = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "dump_format.md").read_text(), flags=re.S)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    printed_names, printed_parent = result.stdout.strip().splitlines()[-2:]
    rank_dir = tmp_path / "dump_format" / "step0" / "rank"
    data = json.loads((rank_dir / "dump.json").read_text())["data"]
    assert ast.literal_eval(printed_names) == list(data)
    assert printed_parent == json.loads((rank_dir / "construct.json").read_text())["Functional.linear.0.forward"]
    assert printed_parent == "Module.0.Linear.forward.0"
    for name in data:
        if ".parameters_grad." in name:  # not a call: docs/dump_format.md#parameters_grad
            assert name.startswith("Module.") and name.rsplit(".", 2)[1] == "parameters_grad", name
            continue
        parsed = parse_name(name)  # raises on a name of neither documented shape
        assert (parsed.kind == "module") == name.startswith("Module."), name
        assert parsed.direction in name.split("."), name
