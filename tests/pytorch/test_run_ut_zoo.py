"""run_ut, multi_run_ut and api_precision_compare on L1 dumps of the tiny LLaMA and GPT-2 of the zoo
(transformers' own code, random weights), in float32 and bfloat16 (autocast), tensor and statistics.

A correct model must replay without an ``error`` (softmax and norm backward, cancelling sums, bias
gradients included); a wrong kernel must be found by run_ut and by stage 2, and msprobe 1.1.1's own
stage 2 must read our details CSVs when a venv holding it is at hand (``MSPROBE_111_VENV``, default
``/tmp/ms111``)."""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from zoo import ZOO, dump_one_step

from msprobe.core import cli
from msprobe.pytorch.run_ut.replay import run_ut

SPECS = {spec.name: spec for spec in ZOO}
DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Path]:
    base = tmp_path_factory.mktemp("run_ut_zoo")
    found = {}
    for model in ("llama", "gpt2"):
        for dtype, autocast in DTYPES.items():
            for task in ("tensor", "statistics"):
                rank = dump_one_step(SPECS[model], base / f"{model}_{dtype}_{task}", task, "L1", autocast, None)
                found[(model, dtype, task)] = rank / "dump.json"
    return found


@pytest.mark.parametrize("model", ["llama", "gpt2"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_correct_model_has_no_error(dumps, tmp_path: Path, model: str, dtype: str, task: str) -> None:
    result = run_ut(dumps[(model, dtype, task)], tmp_path)
    errors = [(r.name, r.forward, r.backward, r.message) for r in result.rows if "error" in (r.forward, r.backward)]
    assert errors == []
    judged_forward = [r for r in result.rows if r.forward != "SKIP"]
    judged_backward = [r for r in result.rows if r.backward not in ("SKIP", "N/A")]
    assert len(judged_forward) >= 100 and len(judged_backward) >= 80  # softmax, norms, linear... all replayed
    names = {o.name for r in result.rows for o in r.outputs}
    assert any(".softmax." in n and ".backward." in n for n in names)
    warnings = [r.name for r in result.rows if "Warning" in (r.forward, r.backward)]
    assert len(warnings) <= 2, warnings


def _wrong_silu(*args, **kwargs):
    return F.silu(*args, **kwargs) * 1.05  # 5 %: 13 bfloat16 units of roundoff (1 % is a Warning there)


def test_wrong_kernel_found_by_run_ut_and_stage2(dumps, tmp_path: Path) -> None:
    dump = dumps[("llama", "bf16", "tensor")]
    trusted = run_ut(dump, tmp_path / "gpu")
    tested = run_ut(dump, tmp_path / "npu", api_override={"Functional.silu": _wrong_silu})
    rows = {r.name: r for r in tested.rows}
    assert rows["Functional.silu.0"].forward == "error"
    assert [f["worst"] for f in tested.summary["failures"] if f["output"].startswith("Functional.silu.0.forward")]
    assert not [r.name for r in trusted.rows if r.forward == "error"]
    npu = _one(tmp_path / "npu", "accuracy_checking_details_*.csv")
    gpu = _one(tmp_path / "gpu", "accuracy_checking_details_*.csv")
    assert cli.main(["-f", "pytorch", "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu),
                     "-o", str(tmp_path / "stage2")]) == 0
    apis = {r["API Name"]: r for r in _rows(_one(tmp_path / "stage2", "api_precision_compare_result_*.csv"))}
    failing = {name for name, r in apis.items() if "error" in (r["Forward Test Success"], r["Backward Test Success"])}
    assert {n for n in failing if n.startswith("Functional.silu.")} == {n for n in apis if n.startswith(
        "Functional.silu.")} and all(n.startswith("Functional.silu.") for n in failing)
    _msprobe_111_reads(npu, gpu, tmp_path / "stage2_111", failing)


def _msprobe_111_reads(npu: Path, gpu: Path, out: Path, failing: set[str]) -> None:
    """msprobe 1.1.1's api_precision_compare on our details CSVs: same failing APIs."""
    venv = Path(os.environ.get("MSPROBE_111_VENV", "/tmp/ms111"))
    if not (venv / "bin" / "msprobe").is_file():
        pytest.skip(f"no msprobe 1.1.1 venv at {venv} (set MSPROBE_111_VENV)")
    done = subprocess.run([str(venv / "bin" / "msprobe"), "-f", "pytorch", "api_precision_compare", "-npu", str(npu),
                           "-gpu", str(gpu), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Error" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-2000:]
    apis = {r["API Name"]: r for r in _rows(_one(out, "api_precision_compare_result_*.csv"))}
    theirs = {name for name, r in apis.items() if "error" in (r["Forward Test Success"], r["Backward Test Success"])}
    assert theirs >= failing and len(apis) >= 100
    # beyond ours, 1.1.1 fails only gradients it judges with the absolute threshold (a gradient summed
    # over broadcast positions is no single rounding: we judge every gradient by the benchmark method)
    details = _rows(_one(out, "api_precision_compare_details_*.csv"))
    extra = [d for d in details if d["API Name"].rsplit(".", 3)[0] in theirs - failing and d["比对结果"] == "error"]
    assert all(".backward." in d["API Name"] and d["比对算法"] == "绝对阈值法" for d in extra), extra


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_multi_run_ut_and_stage2(dumps, tmp_path: Path, dtype: str, task: str) -> None:
    dump = dumps[("gpt2", dtype, task)]
    assert cli.main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "one")]) == 0
    assert cli.main(["-f", "pytorch", "multi_run_ut", "-api_info", str(dump), "-o", str(tmp_path / "two"),
                     "-n", "2"]) == 0
    one = _rows(_one(tmp_path / "one", "accuracy_checking_result_*.csv"))
    two = _rows(_one(tmp_path / "two", "accuracy_checking_result_*.csv"))
    assert [r["API name"] for r in two] == [r["API name"] for r in one] and len(one) >= 100
    assert [(r["Forward Test Success"], r["Backward Test Success"]) for r in two] == \
        [(r["Forward Test Success"], r["Backward Test Success"]) for r in one]
    # stage 2 of the merged details against run_ut's: the same inputs (same seed), so nothing fails
    assert cli.main(["-f", "pytorch", "api_precision_compare",
                     "-npu", str(_one(tmp_path / "two", "accuracy_checking_details_*.csv")),
                     "-gpu", str(_one(tmp_path / "one", "accuracy_checking_details_*.csv")),
                     "-o", str(tmp_path / "stage2")]) == 0
    apis = _rows(_one(tmp_path / "stage2", "api_precision_compare_result_*.csv"))
    assert apis and not [r for r in apis if "error" in (r["Forward Test Success"], r["Backward Test Success"])]


@pytest.mark.parametrize("model", ["vit", "bert", "hf_resnet", "inplace_resnet"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_the_other_zoo_models_replay_without_an_error(tmp_path: Path, model: str, dtype: str) -> None:
    """Every clean zoo model replays without an error. In ViT and BERT, softmax ignores a shift of a row's
    scores, so the key projection's bias gradient is exactly zero: both sides are rounding noise, whose cosine
    similarity was judged an error (docs/run_ut.md#gradients-that-cancel-to-zero)."""
    rank = dump_one_step(SPECS[model], tmp_path / "dump", "tensor", "L1", DTYPES[dtype], None)
    result = run_ut(rank / "dump.json", tmp_path / "out")
    assert [(r.name, r.backward, r.message) for r in result.rows if "error" in (r.forward, r.backward)] == []
    assert len([r for r in result.rows if r.forward != "SKIP"]) >= 20
    if model in ("vit", "bert") and dtype == "fp32":
        key_bias = [o for r in result.rows for o in r.outputs if o.name == "Functional.linear.1.backward.output.2"]
        assert len(key_bias) == 1 and "cancelled_distance" in key_bias[0].verdict.metrics
