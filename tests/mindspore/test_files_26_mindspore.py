"""``"dump_format": "26"`` on MindSpore (docs/dump_format.md#two-layouts): msprobe 26.2.0's layout written for a
zoo model, with the same entries as the default layout's and the training's numbers unchanged."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))

from dump_json import write_config  # noqa: E402
from zoo_ms import ZOO, train  # noqa: E402

from msprobe.core.compare.read import read_stack  # noqa: E402
from msprobe.mindspore import PrecisionDebugger  # noqa: E402

VIT = next(spec for spec in ZOO if spec.name == "vit")


def test_dump_format_26_writes_26_2_0s_layout_on_mindspore(tmp_path):
    reference = train(VIT, steps=1)
    config = write_config(tmp_path, "new", "statistics", "mix", {}, dump_format="26")
    observed = train(VIT, PrecisionDebugger(config_path=str(config)), steps=1)
    assert all(np.array_equal(a, b) for run_a, run_b in zip(reference, observed) for a, b in zip(run_a, run_b))
    step = tmp_path / "new" / "step0"
    assert [d.name for d in step.iterdir()] == [f"proc{os.getpid()}"]
    dump = json.loads((step / f"proc{os.getpid()}" / "dump.json").read_text())
    assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert dump["framework"] == "mindspore" and len(dump["data"]) > 20
    grouped = json.loads((step / f"proc{os.getpid()}" / "stack.json").read_text())
    assert all(isinstance(names, list) and isinstance(frames, list) for names, frames in grouped.values())
    stacks = read_stack(step / f"proc{os.getpid()}" / "stack.json")
    assert len(stacks) == sum(len(names) for names, _ in grouped.values()) and set(stacks) <= set(dump["data"])
    # run_ut reads the new layout's dump.json (its framework key) as it reads the default one
    from msprobe.mindspore.run_ut.replay import run_ut

    result = run_ut(step / f"proc{os.getpid()}" / "dump.json", tmp_path / "run_ut", bench="mindspore")
    forward = [row.forward for row in result.rows]
    assert forward.count("pass") > 3 and set(forward) <= {"pass", "warning", "SKIP"}, set(forward)
