"""msprobe -f mindspore run_ut / multi_run_ut: real MindSpore L1 dumps of a small mint network, replayed
on CPU against PyTorch and against MindSpore upcast; numbers checked against float64 numpy."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, mint, nn, ops

from msprobe.core import cli
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.run_ut.command import multi_run_ut
from msprobe.mindspore.run_ut.replay import run_ut

# the columns of msprobe 1.1.1's MindSpore checker (its data_manager.get_detail_csv_header and
# get_result_csv_header, from MsCompareConst): read in mindstudio-probe 1.1.1's sources
COLUMNS_111 = ["API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr",
               "Status", "Message"]
RESULT_COLUMNS_111 = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
CHECKED = ["Mint.matmul.0", "Mint.add.0", "MintFunctional.relu.0", "MintFunctional.softmax.0", "Tensor.__mul__.0",
           "Mint.sum.0"]


class Net(nn.Cell):
    def __init__(self, dtype) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.w = Parameter(Tensor(rng.standard_normal((4, 3)), dtype), name="w")
        self.b = Parameter(Tensor(rng.standard_normal(3), dtype), name="b")

    def construct(self, x):
        y = mint.matmul(x, self.w)
        y = mint.add(y, self.b)
        y = mint.nn.functional.relu(y)
        y = mint.nn.functional.dropout(y, p=0.5, training=False)  # random: SKIP
        y = mint.nn.functional.softmax(y, dim=-1)
        y = ops.square(y * 2)  # mindspore.ops (Functional): SKIP
        return mint.sum(y)


class Bf16Net(nn.Cell):
    """bfloat16 ops MindSpore's CPU kernels have (add, mul, sub, div)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = Parameter(Tensor(np.linspace(-1, 1, 6).reshape(2, 3), ms.bfloat16), name="w")

    def construct(self, x):
        y = mint.add(x, self.w)
        y = mint.mul(y, x)
        y = mint.div(mint.sub(y, 0.25), 3.0)
        return mint.sum(y.float())


def _dump(root: Path, task: str, net: nn.Cell, dtype) -> Path:
    debugger = PrecisionDebugger(dump_path=str(root), task=task, level="L1", step=[0])
    grad_fn = ms.value_and_grad(lambda a: net(a), None, net.trainable_params())
    x = Tensor(np.random.default_rng(1).uniform(-2, 2, (2, 4) if isinstance(net, Net) else (2, 3)), dtype)
    debugger.start(net)
    grad_fn(x)
    debugger.stop()
    debugger.step()
    return root / "step0" / "rank" / "dump.json"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ms_run_ut")
    return {
        "tensor": _dump(root / "tensor", "tensor", Net(ms.float32), ms.float32),
        "stats": _dump(root / "stats", "statistics", Net(ms.float32), ms.float32),
        "fp16": _dump(root / "fp16", "tensor", Net(ms.float16), ms.float16),
        "bf16": _dump(root / "bf16", "tensor", Bf16Net(), ms.bfloat16),
    }


def _cli(*argv: str) -> int:
    return cli.main(["-f", "mindspore", *argv])


def _rows(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def _by_name(rows: list[dict[str, str]], key: str = "API Name") -> dict[str, dict[str, str]]:
    return {r[key]: r for r in rows}


def _npy(dump_json: Path, name: str) -> np.ndarray:
    return np.load(dump_json.parent / "dump_tensor_data" / f"{name}.npy").astype(np.float64)


def test_tensor_dump_against_pytorch_matches_numpy(dumps: dict[str, Path], tmp_path: Path) -> None:
    dump = dumps["tensor"]
    result = run_ut(dump, tmp_path, bench="torch")
    summary = result.summary
    assert summary["bench"].startswith("PyTorch") and summary["seed"] is None
    results = _by_name(_rows(summary["result_csv"]))
    for name in CHECKED:
        assert (results[name]["Forward Test Success"], results[name]["Backward Test Success"]) == ("pass", "pass"), \
            results[name]
    assert results["MintFunctional.dropout.0"]["Forward Test Success"] == "SKIP"
    assert "random" in results["MintFunctional.dropout.0"]["Message"]
    assert "not checked" in results["Functional.square.0"]["Message"]
    assert result.checked == len(CHECKED)

    raw = Path(summary["details_csv"]).read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    with open(summary["details_csv"], encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:9] == COLUMNS_111
    details = _by_name(_rows(summary["details_csv"]), "API Name")

    # forward: the device (MindSpore float32, rerun) against float64 numpy of the dumped inputs
    x, w = _npy(dump, "Mint.matmul.0.forward.input.0"), _npy(dump, "Mint.matmul.0.forward.input.1")
    device = _npy(dump, "Mint.matmul.0.forward.output.0")
    row = details["Mint.matmul.0.forward.output.0"]
    assert (row["Bench Dtype"], row["Tested Dtype"], row["Shape"]) == ("Float64", "Float32", "(2, 3)")
    assert row["Status"] == "pass" and row["Standard"] == "ulp"
    assert float(row["MaxAbsErr"]) == pytest.approx(np.abs(device - x @ w).max(), rel=1e-9, abs=1e-15)
    # backward: input gradients for the recorded output gradient, against numpy; x needed no gradient in
    # the run (value_and_grad over the weights), so its recorded gradient is null and only the replay has one
    grad = _npy(dump, "Mint.matmul.0.backward.input.0")
    assert json.loads(dump.read_text())["data"]["Mint.matmul.0.backward"]["output"][0] is None
    assert details["Mint.matmul.0.backward.output.0"]["Status"] == "pass"
    row = details["Mint.matmul.0.backward.output.1"]
    got = _npy(dump, "Mint.matmul.0.backward.output.1")
    assert row["Status"] == "pass"
    assert float(row["MaxAbsErr"]) == pytest.approx(np.abs(got - x.T @ grad).max(), rel=1e-6, abs=1e-12)


def test_statistics_dump_uses_seeded_generated_inputs(dumps: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real_add = mint.add
    monkeypatch.setattr(mint, "add", lambda a, b, **kw: real_add(a, b, **kw) * 1.01)  # a wrong kernel
    result = run_ut(dumps["stats"], tmp_path, bench="torch", seed=7, save_error_data=True)
    assert result.summary["seed"] == 7 and result.summary["inputs"] == "generated from statistics"
    results = _by_name(_rows(result.summary["result_csv"]))
    assert results["Mint.add.0"]["Forward Test Success"] == "error"
    assert results["Mint.matmul.0"]["Forward Test Success"] == "pass"

    # the saved inputs are the documented draw: uniform in the recorded [Min, Max], rounded to float32
    entry = json.loads(dumps["stats"].read_text())["data"]["Mint.add.0.forward"]
    rng = np.random.default_rng([7, zlib.crc32(b"Mint.add.0")])
    folder = tmp_path / "error_data" / "Mint.add.0"
    for i, record in enumerate(entry["input_args"]):
        expect = rng.uniform(record["Min"], record["Max"], size=record["shape"]).astype(np.float32)
        np.testing.assert_array_equal(np.load(folder / f"input.{i}.npy"), expect.astype(np.float64))
    x, b = (np.load(folder / f"input.{i}.npy") for i in range(2))
    bench = np.load(folder / "bench_output.0.npy")
    np.testing.assert_allclose(bench, x + b, rtol=0, atol=0)  # float64 bench of float32 values: exact
    device = np.load(folder / "device_output.0.npy")
    np.testing.assert_allclose(device, (x + b).astype(np.float32).astype(np.float64) * np.float32(1.01),
                               rtol=1e-6)

    # worst elements, in the details CSV and the summary, name the largest errors
    row = _by_name(_rows(result.summary["details_csv"]), "API Name")["Mint.add.0.forward.output.0"]
    worst = json.loads(row["Worst Elements"])
    errors = np.abs(device - bench)
    assert worst[0]["abs_err"] == pytest.approx(errors.max())
    assert tuple(worst[0]["index"]) == np.unravel_index(errors.argmax(), errors.shape)
    assert worst[0]["device"] == pytest.approx(device[tuple(worst[0]["index"])])
    failing = [f["output"] for f in result.summary["failures"]]
    assert "Mint.add.0.forward.output.0" in failing

    again = run_ut(dumps["stats"], tmp_path / "again", bench="torch", seed=7, save_error_data=True)
    first = _rows(result.summary["details_csv"])
    second = _rows(again.summary["details_csv"])
    assert [r["MaxAbsErr"] for r in first] == [r["MaxAbsErr"] for r in second]


@pytest.mark.parametrize("which,tested,bench", [("fp16", "Float16", "Float32"), ("bf16", "BFloat16", "Float32")])
def test_low_precision_dumps(dumps: dict[str, Path], tmp_path: Path, which: str, tested: str, bench: str) -> None:
    result = run_ut(dumps[which], tmp_path, bench="torch")
    rows = _rows(result.summary["result_csv"])
    judged = [r for r in rows if r["Forward Test Success"] != "SKIP"]
    assert judged and result.checked >= 3
    assert all(r["Forward Test Success"] in ("pass", "Warning") for r in judged), judged
    details = _rows(result.summary["details_csv"])
    low = [d for d in details if d["Tested Dtype"] == tested]
    assert low and all(d["Bench Dtype"] == bench for d in low)
    if which == "bf16":  # the bfloat16 add against float32 numpy of the same (bfloat16) inputs
        dump = dumps["bf16"]
        x, w = _npy(dump, "Mint.add.0.forward.input.0"), _npy(dump, "Mint.add.0.forward.input.1")
        row = _by_name(details, "API Name")["Mint.add.0.forward.output.0"]
        device = _npy(dump, "Mint.add.0.forward.output.0")
        assert float(row["MaxAbsErr"]) == pytest.approx(np.abs(device - (x + w)).max(), abs=1e-12)


def test_mindspore_bench_catches_a_wrong_api(dumps: dict[str, Path], tmp_path: Path) -> None:
    """No PyTorch needed: the bench is MindSpore itself, float32 inputs computed in float64."""
    result = run_ut(dumps["tensor"], tmp_path, bench="mindspore",
                    api_override={"MintFunctional.softmax": lambda x, dim=None: mint.nn.functional.softmax(x * 1.05,
                                                                                                         dim=dim)})
    assert result.summary["bench"].startswith("MindSpore")
    results = _by_name(_rows(result.summary["result_csv"]))
    assert results["MintFunctional.softmax.0"]["Forward Test Success"] in ("error", "Warning")
    for name in set(CHECKED) - {"MintFunctional.softmax.0"}:
        assert results[name]["Forward Test Success"] == "pass", results[name]
    details = _by_name(_rows(result.summary["details_csv"]), "API Name")
    assert details["Mint.sum.0.forward.output.0"]["Bench Dtype"] == "Float64"


def test_torch_absent_falls_back_to_mindspore(dumps: dict[str, Path], tmp_path: Path) -> None:
    """A real process in which ``import torch`` fails: ``-bench auto`` uses MindSpore, ``-bench torch`` exits 2."""
    script = ("import sys; sys.modules['torch'] = None\n"
              "from msprobe.core import cli\n"
              "out, dump = sys.argv[1], sys.argv[2]\n"
              "run = ['-f', 'mindspore', 'run_ut', '-api_info', dump]\n"
              "auto = cli.main([*run, '-o', out])\n"
              "forced = cli.main([*run, '-o', out + '_t', '-bench', 'torch'])\n"
              "print('CODES', auto, forced)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out"), str(dumps["tensor"])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert "CODES 0 2" in done.stdout, done.stdout + done.stderr
    summary = json.loads(next((tmp_path / "out").glob("accuracy_checking_summary_*.json")).read_text())
    assert summary["bench"].startswith("MindSpore") and summary["forward"] == {"pass": len(CHECKED), "SKIP": 2}


def test_multi_run_ut_merges_parts_in_order(dumps: dict[str, Path], tmp_path: Path) -> None:
    single = run_ut(dumps["tensor"], tmp_path / "one", bench="mindspore")
    summary, checked = multi_run_ut(dumps["tensor"], tmp_path / "multi", parts=2, bench="mindspore")
    assert summary["parts"] == 2 and checked == single.checked
    strip = ("Message",)
    one, many = _rows(single.summary["result_csv"]), _rows(summary["result_csv"])
    assert [{k: v for k, v in r.items() if k not in strip} for r in one] == \
        [{k: v for k, v in r.items() if k not in strip} for r in many]
    d_one, d_many = _rows(single.summary["details_csv"]), _rows(summary["details_csv"])
    assert list(d_many[0])[:9] == COLUMNS_111
    assert [(r["API Name"], r["Status"], r["MaxAbsErr"]) for r in d_one] == \
        [(r["API Name"], r["Status"], r["MaxAbsErr"]) for r in d_many]
    assert not list((tmp_path / "multi").glob(".multi_run_ut_*"))
    with pytest.raises(SystemExit) as usage:
        _cli("multi_run_ut", "-api_info", str(dumps["tensor"]), "-o", str(tmp_path / "c"), "-n", "65")
    assert usage.value.code == 2


def test_resume_and_filter(dumps: dict[str, Path], tmp_path: Path) -> None:
    first = run_ut(dumps["tensor"], tmp_path, bench="mindspore", apis={"Mint.matmul.0", "Mint.add.0"})
    assert _cli("run_ut", "-api_info", str(dumps["tensor"]), "-csv_path", first.summary["result_csv"],
                "-bench", "mindspore") == 0
    names = [r["API Name"] for r in _rows(first.summary["result_csv"])]
    assert sorted(names) == sorted(set(names)) and len(names) == len(CHECKED) + 2
    assert names[:2] == ["Mint.matmul.0", "Mint.add.0"]
    details = [r["API Name"] for r in _rows(first.summary["details_csv"])]
    assert len(details) == len(set(details))


def test_missing_tensor_file_and_relative_dump_data_dir(dumps: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    source = dumps["tensor"].parent
    copy = tmp_path / "copy"
    (copy / "tensors").mkdir(parents=True)
    for item in (source / "dump_tensor_data").iterdir():
        (copy / "tensors" / item.name).write_bytes(item.read_bytes())
    data = json.loads(dumps["tensor"].read_text())
    data["dump_data_dir"] = "tensors"  # relative: to the dump.json, not to the working directory
    (copy / "dump.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    assert _cli("run_ut", "-api_info", str(copy / "dump.json"), "-o", str(tmp_path / "ok"), "-bench",
                "mindspore") == 0
    (copy / "tensors" / "Mint.add.0.forward.input.0.npy").unlink()
    with pytest.raises(ValueError, match="Mint.add.0.forward.input.0.npy"):
        run_ut(copy / "dump.json", tmp_path / "bad", bench="mindspore")
    assert _cli("run_ut", "-api_info", str(copy / "dump.json"), "-o", str(tmp_path / "bad2")) == 2


def test_nothing_checked_exits_1(dumps: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(dumps["tensor"].read_text())
    data["data"] = {k: v for k, v in data["data"].items() if k.startswith(("Functional.", "MintFunctional.dropout"))}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(data))
    (tmp_path / "dump_tensor_data").symlink_to(dumps["tensor"].parent / "dump_tensor_data")
    assert _cli("run_ut", "-api_info", str(path), "-o", str(tmp_path / "out"), "-bench", "mindspore") == 1


def test_filter_duplicates_checks_one_of_each_group(dumps: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(dumps["tensor"].read_text())
    entries = data["data"]
    entries["Mint.add.1.forward"] = entries["Mint.add.0.forward"]  # same name, dtypes, shapes, arguments
    changed = json.loads(json.dumps(entries["Mint.add.0.forward"]))
    changed["input_kwargs"] = {"alpha": {"type": "float", "value": 2.0}}  # another argument: kept
    entries["Mint.add.2.forward"] = changed
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(data))
    (tmp_path / "dump_tensor_data").symlink_to(dumps["tensor"].parent / "dump_tensor_data")
    assert _cli("run_ut", "-api_info", str(path), "-o", str(tmp_path / "out"), "-f", "-bench", "mindspore") == 0
    names = [r["API Name"] for r in _rows(next((tmp_path / "out").glob("accuracy_checking_result_*.csv")))]
    assert "Mint.add.0" in names and "Mint.add.1" not in names and "Mint.add.2" in names


def test_config_lists_and_error_data_path(dumps: dict[str, Path], tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """-config reads the run_ut section: lists checked against MindSpore's API table (a typo is an error
    with a hint, before any replay), a white list restricts the rows of run_ut and multi_run_ut, and
    error_data_path is read as given."""
    from msprobe.mindspore.run_ut.replay import load_run_ut_section

    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["matmull"]}}))
    assert _cli("run_ut", "-api_info", str(dumps["tensor"]), "-o", str(tmp_path / "t"), "-config", str(typo)) == 2
    assert "matmull" in caplog.text and "did you mean 'matmul'" in caplog.text
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").glob("accuracy_checking_result_*.csv"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["Mint.add"],
                                                               "error_data_path": str(tmp_path / "errors")}}))
    assert _cli("run_ut", "-api_info", str(dumps["tensor"]), "-o", str(tmp_path / "out"), "-config", str(config),
                "-bench", "mindspore") == 0
    names = [r["API Name"] for r in _rows(next((tmp_path / "out").glob("accuracy_checking_result_*.csv")))]
    assert names and all(name.startswith("Mint.add.") for name in names)
    assert _cli("multi_run_ut", "-api_info", str(dumps["tensor"]), "-o", str(tmp_path / "multi"), "-n", "2",
                "-config", str(config), "-bench", "mindspore") == 0
    multi = [r["API Name"] for r in _rows(next((tmp_path / "multi").glob("accuracy_checking_result_*.csv")))]
    assert multi == names
    assert load_run_ut_section(config).error_data_path == str(tmp_path / "errors")


def _raw_rows(path: str | Path) -> list[list[str]]:
    raw = Path(path).read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")  # UTF-8 with a BOM, as 1.1.1 wrote (utf-8-sig)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def test_result_csv_is_1_1_1s_mindspore_checkers(dumps: dict[str, Path], tmp_path: Path) -> None:
    """The result CSV's header is 1.1.1's MindSpore checker's, an API without a backward in the dump has an
    empty backward cell (1.1.1 left it empty; PyTorch's report says N/A), the same from multi_run_ut, and
    the summaries still count it as N/A."""
    data = json.loads(dumps["tensor"].read_text())
    del data["data"]["Mint.add.0.backward"]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(data))
    (tmp_path / "dump_tensor_data").symlink_to(dumps["tensor"].parent / "dump_tensor_data")
    single = run_ut(path, tmp_path / "one", bench="mindspore")
    summary, _ = multi_run_ut(path, tmp_path / "multi", parts=2, bench="mindspore")
    for result_csv in (single.summary["result_csv"], summary["result_csv"]):
        header, *rows = _raw_rows(result_csv)
        assert header == RESULT_COLUMNS_111
        by_name = {r[0]: r for r in rows}
        assert by_name["Mint.add.0"][1:] == ["pass", "", ""]
        assert by_name["Mint.matmul.0"][1:] == ["pass", "pass", ""]
        assert {r[1] for r in rows} <= {"pass", "Warning", "error", "SKIP"} and "N/A" not in {r[2] for r in rows}
    assert _raw_rows(single.summary["details_csv"])[0][:9] == COLUMNS_111
    assert single.summary["backward"]["N/A"] == summary["backward"]["N/A"] == 1
    assert single.summary["backward"] == summary["backward"]


def test_resume_from_a_result_csv_written_as_1_1_1_writes_it(dumps: dict[str, Path], tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A result CSV headed as 1.1.1's MindSpore checker heads it is resumed: its APIs are not checked again;
    one headed as the PyTorch checker's (``API name``) is refused, naming the header expected."""
    ours = tmp_path / "accuracy_checking_result_20250101000000.csv"
    ours.write_text(",".join(RESULT_COLUMNS_111) + "\nMint.matmul.0,pass,pass,\n", encoding="utf-8-sig")
    assert _cli("run_ut", "-api_info", str(dumps["tensor"]), "-csv_path", str(ours), "-bench", "mindspore") == 0
    names = [r[0] for r in _raw_rows(ours)[1:]]
    assert names.count("Mint.matmul.0") == 1 and set(CHECKED) <= set(names)
    details = [r[0] for r in _raw_rows(tmp_path / "accuracy_checking_details_20250101000000.csv")[1:]]
    assert details and not any(d.startswith("Mint.matmul.0.") for d in details)
    torch_style = tmp_path / "torch" / "accuracy_checking_result_20250101000000.csv"
    torch_style.parent.mkdir()
    torch_style.write_text("API name,Forward Test Success,Backward Test Success,Message\n", encoding="utf-8-sig")
    for command in ("run_ut", "multi_run_ut"):
        assert _cli(command, "-api_info", str(dumps["tensor"]), "-csv_path", str(torch_style)) == 2
    assert f"does not start with the header {', '.join(RESULT_COLUMNS_111)}" in caplog.text
