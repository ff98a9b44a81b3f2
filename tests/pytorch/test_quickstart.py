"""``make demo`` (examples/quickstart.py) tells the story the docs tell: bf16 rounding is not named as a
divergence, a 5% fault in fc1 is named at fc1's linear, and the API pre-check of the bf16 dump fails
nothing but a deliberately wrong gelu."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.graph import run_graph
from msprobe.core.graph.vis import EXCESS_BANDS
from msprobe.pytorch.tensor_files import load_pt

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"

pytestmark = pytest.mark.slow


def test_the_demo_names_the_fault_and_not_the_rounding(tmp_path, capsys, msprobe_log):
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
    # the fault enters through fc1's weight: the log line and the reports name it
    assert "enters through input.1 (a parameter: fc1.weight)" in msprobe_log.text()
    (csv,) = (tmp_path / "compare_fault").glob("*.csv")
    assert "First divergence enters here: input.1 (a parameter: fc1.weight)" in csv.read_text()
    (page,) = (tmp_path / "compare_fault").glob("*.html")
    assert "fc1.weight" in page.read_text()
    # the graph view colours by the same rule: no red node from bf16 rounding, fc1 red with the fault
    for npu, red in (("bf16", False), ("bf16_fault", True)):
        config = tmp_path / f"graph_{npu}.json"
        config.write_text(json.dumps({"npu_path": str(tmp_path / npu / "step0" / "rank"),
                                      "bench_path": str(tmp_path / "fp32" / "step0" / "rank")}))
        (written,) = run_graph(config, tmp_path / f"graph_{npu}", load_pt, CompareOptions(workers=1, progress=False))
        view = json.loads(re.search(r"const DATA = (.*?);\nconst NPU", written.html.read_text(), re.S).group(1))
        coloured = {n for n, v in view["npu"]["nodes"].items() if v["color"] == EXCESS_BANDS[-1][0]}
        assert ("Module.fc1.Linear.forward.0" in coloured) == red and (bool(coloured) == red), coloured
