"""config_check on real MindSpore runs (PyNative, CPU): identical runs agree; one weight and one seed are
named; .ckpt checkpoints compare against float64 numpy (docs/config_check.md#mindspore)."""

from __future__ import annotations

import sys
from pathlib import Path

import mindspore
import numpy as np
import pytest

from msprobe.core.cli import main
from msprobe.core.config_check import diff_packs, read_pack
from msprobe.core.config_check.checkpoint import compare_checkpoints
from msprobe.mindspore.config_check import load_mindspore_checkpoint

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "config_check"))  # importlib mode
from pack_runs import run_variants  # noqa: E402

SCRIPT = Path(__file__).parent / "config_check_train_ms.py"
VARIANTS = ("base", "again", "weight", "seed")


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("ms_config_check")
    return run_variants(SCRIPT, work, {name: ([], {"CC_VARIANT": name}) for name in VARIANTS})


def _named(packs, variant):
    return [(d.section, d.item, d.kind) for d in diff_packs(read_pack(packs["base"]), read_pack(packs[variant]))]


@pytest.mark.slow
def test_identical_runs_agree_and_pack_holds_every_section(packs):
    assert _named(packs, "again") == []
    framework, sections = read_pack(packs["base"])
    assert framework == "mindspore" and set(sections["data"]) == {"step0", "step1"}
    assert sections["framework"]["mindspore"] == mindspore.__version__
    assert any(site.startswith("mindspore.ops.standard_normal @ config_check_train_ms.py:")
               for site in sections["random"]["calls"])


@pytest.mark.slow
def test_one_weight_is_named(packs):
    assert _named(packs, "weight") == [("weights", "0.weight", "changed")]


@pytest.mark.slow
def test_another_seed_is_named(packs):
    named = {(s, i.split(" @ ")[0]) for s, i, _ in _named(packs, "seed")}
    assert ("random", "call mindspore.set_seed") in named and ("random", "seed mindspore.get_seed") in named


def test_ckpt_compare(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    moved = w.copy()
    moved[2, 0] -= 0.125
    mindspore.save_checkpoint([{"name": "w", "data": mindspore.Tensor(w)}], str(tmp_path / "a.ckpt"))
    mindspore.save_checkpoint([{"name": "w", "data": mindspore.Tensor(moved)},
                               {"name": "b", "data": mindspore.Tensor(np.zeros(2, np.float32))}],
                              str(tmp_path / "b.ckpt"))
    rows = {r.cells[0]: r.cells for r in compare_checkpoints(load_mindspore_checkpoint(tmp_path / "a.ckpt"),
                                                             load_mindspore_checkpoint(tmp_path / "b.ckpt"))}
    reference = np.linalg.norm(moved.astype(np.float64) - w) / np.linalg.norm(w.astype(np.float64))
    assert rows["w"][1] == "values differ" and float(rows["w"][6]) == pytest.approx(reference, rel=1e-12)
    assert rows["b"][1] == "missing in A"
    assert main(["-f", "mindspore", "config_check", "-c", str(tmp_path / "a.ckpt"), str(tmp_path / "b.ckpt"),
                 "-o", str(tmp_path / "out")]) == 0
    assert "checkpoint: 2 difference(s)" in capsys.readouterr().out
