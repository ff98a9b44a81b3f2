"""config_check's framework-free half: flag parsing, the pack's atomic zip, the diff's order, safetensors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from msprobe.core.config_check import PackError, diff_packs, read_pack, write_pack
from msprobe.core.config_check.checkpoint import compare_checkpoints, read_safetensors
from msprobe.core.config_check.hyperparams import from_script, parse_flags


def test_flag_followed_by_flag_and_equals_and_negative_values():
    assert parse_flags(["--bf16", "--weight-decay", "0.1", "--lr=3e-4", "--beta", "-0.5", "-n", "2", "--last"]) == {
        "bf16": "true", "weight_decay": "0.1", "learning_rate": "3e-4", "beta": "-0.5", "n": "2", "last": "true"}


def test_script_continuations_comments_and_variables(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("export LR=0.05\n# --lr 9\ntorchrun --nproc_per_node 8 train.py \\\n"
                      "    --lr $LR --fp16 \\\n    --micro-batch-size 4  # comment\n")
    assert from_script(script) == {"nproc_per_node": "8", "learning_rate": "0.05", "fp16": "true",
                                   "micro_batch_size": "4"}


def test_pack_round_trip_and_refusals(tmp_path):
    path = write_pack(tmp_path / "p.zip", "pytorch", {"environment": {"A": "=cmd|x"}, "packages": {}})
    assert read_pack(path) == ("pytorch", {"environment": {"A": "=cmd|x"}, "packages": {}})
    assert [p.name for p in tmp_path.iterdir()] == ["p.zip"]  # no temporary file left
    (tmp_path / "bad.zip").write_text("not a zip")
    with pytest.raises(PackError, match="is not a zip file"):
        read_pack(tmp_path / "bad.zip")
    with pytest.raises(PackError, match="section 'tensors' is unknown"):
        write_pack(tmp_path / "q.zip", "pytorch", {"tensors": {}})


def test_differences_that_change_numbers_come_first():
    a = ("pytorch", {"packages": {"torch": "2.1", "rich": "13"}, "hyperparameters": {"save_dir": "/a", "lr": "1"},
                     "weights": {"w": "x"}})
    b = ("pytorch", {"packages": {"torch": "2.2", "rich": "14"}, "hyperparameters": {"save_dir": "/b", "lr": "1"},
                     "weights": {"w": "y"}})
    rows = [(d.section, d.item, d.changes_numbers) for d in diff_packs(a, b)]
    assert rows == [("weights", "w", True), ("packages", "torch", True),
                    ("hyperparameters", "save_dir", False), ("packages", "rich", False)]


def _safetensors(path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = array.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_safetensors_compare_against_float64_reference(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    moved = w.copy()
    moved[1, 2] += 0.25
    _safetensors(tmp_path / "a.safetensors", {"w": w, "b": np.zeros(2, np.float32), "gone": np.ones(1, np.float32)})
    _safetensors(tmp_path / "b.safetensors", {"w": moved, "b": np.zeros(2, np.float32)})
    rows = {r.cells[0]: r for r in compare_checkpoints(read_safetensors(tmp_path / "a.safetensors"),
                                                       read_safetensors(tmp_path / "b.safetensors"))}
    reference = np.linalg.norm(moved.astype(np.float64) - w) / np.linalg.norm(w.astype(np.float64))
    assert rows["w"].cells[1] == "values differ" and float(rows["w"].cells[6]) == pytest.approx(reference, rel=1e-12)
    assert rows["b"].cells[1] == "equal" and not rows["b"].changes_numbers
    assert rows["gone"].cells[1] == "missing in B"


def test_formula_like_values_are_text_and_the_report_is_written(tmp_path, capsys):
    from msprobe.core.config_check.command import compare_pack_files

    a = write_pack(tmp_path / "a.zip", "pytorch", {"environment": {"X_VAR": "=cmd|' /c calc'!A0"}})
    b = write_pack(tmp_path / "b.zip", "pytorch", {"environment": {"X_VAR": "+1", "Y": "@SUM(1)"}})
    differences, paths = compare_pack_files(str(a), str(b), str(tmp_path / "out"))
    assert [(d.item, d.kind) for d in differences] == [("X_VAR", "changed"), ("Y", "only in B")]
    import zipfile

    with zipfile.ZipFile(paths["xlsx"]) as book:
        sheet = book.read("xl/worksheets/sheet1.xml").decode()
    assert "<f>" not in sheet and "=cmd|" in sheet
    assert "environment: 2 difference(s)" in capsys.readouterr().out
