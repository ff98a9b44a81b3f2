"""``msprobe -f pytorch run_ut``: replay real L1 dumps of a small transformer-ish model on CPU."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from msprobe.core import cli
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.run_ut.replay import run_ut


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 16)  # same shapes as q: a duplicate for -f
        self.norm = torch.nn.LayerNorm(16)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(self.q(x)))
        att = torch.softmax(torch.matmul(h, self.k(h).transpose(-1, -2)) / 4.0, dim=-1)
        return self.drop(att @ h + x)


def _dump(root: Path, task: str, autocast: bool = False) -> Path:
    torch.manual_seed(0)
    model = Block()
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(root))
    x = torch.randn(2, 8, 16, requires_grad=True)
    weight = torch.randn(2, 8, 16)
    debugger.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = model(x)
    (y.float() * weight).sum().backward()
    debugger.stop()
    debugger.step()
    found = sorted(root.rglob("dump.json"))
    assert found, f"no dump.json under {root}"
    return found[0]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("run_ut_dumps")
    return {
        "fp32": _dump(base / "fp32", "tensor"),
        "bf16": _dump(base / "bf16", "tensor", autocast=True),
        "stats": _dump(base / "stats", "statistics"),
    }


def _cli(*argv: str) -> int:
    return cli.main(["-f", "pytorch", "run_ut", *argv])


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def _forward_names(dump_json: Path) -> list[str]:
    data = json.loads(dump_json.read_text())["data"]
    return [n.removesuffix(".forward") for n in data if n.endswith(".forward")]


def test_fp32_tensor_dump_replays_every_forward_api(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path)) == 0
    result = _one(tmp_path, "accuracy_checking_result_*.csv")
    assert result.read_bytes().startswith(b"\xef\xbb\xbf")
    rows = {r["API name"]: r for r in _rows(result)}
    assert list(rows) == _forward_names(dumps["fp32"])
    assert not any(name.startswith("Module.") for name in rows)
    assert rows["Functional.dropout.0"]["Forward Test Success"] == "SKIP"
    assert "not numerically comparable" in rows["Functional.dropout.0"]["Message"]
    checked = [r for r in rows.values() if r["Forward Test Success"] != "SKIP"]
    assert len(checked) >= 8
    assert sum(r["Forward Test Success"] == "pass" for r in checked) >= 0.8 * len(checked)
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"
    assert rows["Functional.linear.0"]["Backward Test Success"] == "pass"
    details = _rows(_one(tmp_path, "accuracy_checking_details_*.csv"))
    names = {d["API Name"] for d in details}
    assert "Functional.linear.0.forward.output.0" in names
    assert "Functional.linear.0.backward.output.1" in names  # the weight's gradient
    linear = next(d for d in details if d["API Name"] == "Functional.linear.0.forward.output.0")
    assert (linear["Bench Dtype"], linear["DEVICE Dtype"], linear["Standard"]) == ("torch.float64", "torch.float32",
                                                                                   "ulp")
    summary = json.loads(_one(tmp_path, "accuracy_checking_summary_*.json").read_text())
    assert summary["forward"]["SKIP"] >= 1 and summary["task"] == "tensor" and summary["seed"] is None


def test_bf16_autocast_dump(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["bf16"]), "-o", str(tmp_path)) == 0
    rows = {r["API name"]: r for r in _rows(_one(tmp_path, "accuracy_checking_result_*.csv"))}
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"
    details = {d["API Name"]: d for d in _rows(_one(tmp_path, "accuracy_checking_details_*.csv"))}
    out = details["Functional.linear.0.forward.output.0"]
    assert (out["DEVICE Dtype"], out["Bench Dtype"]) == ("torch.bfloat16", "torch.float32")


def test_statistics_dump_generates_seeded_inputs(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["stats"]), "-o", str(tmp_path / "a")) == 0
    assert _cli("-api_info", str(dumps["stats"]), "-o", str(tmp_path / "b")) == 0
    a = _rows(_one(tmp_path / "a", "accuracy_checking_details_*.csv"))
    b = _rows(_one(tmp_path / "b", "accuracy_checking_details_*.csv"))
    assert [r["最大绝对误差"] for r in a] == [r["最大绝对误差"] for r in b]  # same seed, same inputs
    summary = json.loads(_one(tmp_path / "a", "accuracy_checking_summary_*.json").read_text())
    assert summary["seed"] == 1234 and summary["inputs"] == "generated from statistics"
    rows = {r["API name"]: r for r in _rows(_one(tmp_path / "a", "accuracy_checking_result_*.csv"))}
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"


def test_wrong_device_api_is_reported_with_worst_elements(dumps: dict[str, Path], tmp_path: Path) -> None:
    def wrong_gelu(*args, **kwargs):
        return F.gelu(*args, **kwargs) * 1.01

    result = run_ut(dumps["fp32"], tmp_path, api_override={"Functional.gelu": wrong_gelu}, save_error_data=True)
    rows = {r.name: r for r in result.rows}
    assert rows["Functional.gelu.0"].forward == "error"
    assert rows["Functional.linear.0"].forward == "pass"
    detail = next(d for d in _rows(_one(tmp_path, "accuracy_checking_details_*.csv"))
                  if d["API Name"] == "Functional.gelu.0.forward.output.0")
    worst = json.loads(detail["Worst Elements"])
    assert 1 <= len(worst) <= 10 and {"index", "device", "bench", "abs_err"} <= set(worst[0])
    assert worst[0]["device"] == pytest.approx(worst[0]["bench"] * 1.01, rel=1e-5)
    failures = [f for f in result.summary["failures"] if f["output"] == "Functional.gelu.0.forward.output.0"]
    assert failures and failures[0]["worst"]
    saved = tmp_path / "error_data" / "Functional.gelu.0"
    assert (saved / "input.0.pt").is_file() and (saved / "device_output.0.pt").is_file()
    assert (saved / "bench_output.0.pt").is_file()
    device_out = torch.load(saved / "device_output.0.pt", weights_only=True)
    bench_out = torch.load(saved / "bench_output.0.pt", weights_only=True)
    assert device_out.dtype == torch.float32 and bench_out.dtype == torch.float64


def test_an_api_that_raises_is_a_skip_row_and_the_run_goes_on(dumps: dict[str, Path], tmp_path: Path) -> None:
    """The row says the first line of the exception (none, for one without a message); the other APIs are
    judged, and the backward of the failing API is not replayed."""

    def silent(*args, **kwargs):
        raise RuntimeError()

    def verbose(*args, **kwargs):
        raise ValueError("first line\nsecond line")

    result = run_ut(dumps["fp32"], tmp_path, api_override={"Functional.gelu": silent, "Functional.layer_norm": verbose})
    rows = {r.name: r for r in result.rows}
    assert (rows["Functional.gelu.0"].forward, rows["Functional.gelu.0"].backward) == ("SKIP", "SKIP")
    assert rows["Functional.gelu.0"].message == "replay failed: RuntimeError: "
    assert rows["Functional.layer_norm.0"].message == "replay failed: ValueError: first line"
    assert not rows["Functional.gelu.0"].input_error
    assert rows["Functional.linear.0"].forward == "pass" and result.checked == len(rows) - 3  # and the dropout


def test_resume_from_result_csv(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path)) == 0
    result = _one(tmp_path, "accuracy_checking_result_*.csv")
    details = _one(tmp_path, "accuracy_checking_details_*.csv")
    full, full_details = _rows(result), _rows(details)
    lines = result.read_text(encoding="utf-8").splitlines(keepends=True)
    result.write_text("".join(lines[:4]), encoding="utf-8")  # header + 3 APIs: "interrupted"
    assert _cli("-api_info", str(dumps["fp32"]), "-csv_path", str(result)) == 0
    resumed = _rows(result)
    assert [r["API name"] for r in resumed] == [r["API name"] for r in full]
    assert len(list(tmp_path.glob("accuracy_checking_result_*.csv"))) == 1
    # the details rows of the APIs checked again were trimmed, not duplicated
    assert [r["API Name"] for r in _rows(details)] == [r["API Name"] for r in full_details]


def test_filter_duplicates(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path), "-f") == 0
    names = [r["API name"] for r in _rows(_one(tmp_path, "accuracy_checking_result_*.csv"))]
    assert "Functional.linear.0" in names and "Functional.linear.1" not in names  # q and k: same shapes
    assert len(names) < len(_forward_names(dumps["fp32"]))


def _config(tmp_path: Path, section: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "run_ut", "run_ut": section}))
    return path


def test_white_and_black_lists(dumps: dict[str, Path], tmp_path: Path) -> None:
    white = _config(tmp_path, {"white_list": ["linear", "softmax"]})
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "w"), "-config", str(white)) == 0
    names = {r["API name"] for r in _rows(_one(tmp_path / "w", "accuracy_checking_result_*.csv"))}
    assert names == {"Functional.linear.0", "Functional.linear.1", "Torch.softmax.0"}
    black = _config(tmp_path, {"black_list": ["linear"]})
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "b"), "-config", str(black)) == 0
    names = {r["API name"] for r in _rows(_one(tmp_path / "b", "accuracy_checking_result_*.csv"))}
    assert names and not any("linear" in n for n in names)


def test_nothing_checked_exits_non_zero(dumps: dict[str, Path], tmp_path: Path) -> None:
    only_dropout = _config(tmp_path, {"white_list": ["dropout"]})
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "o"), "-config", str(only_dropout)) == 1


def test_missing_tensor_file_is_a_skip_row_naming_it(dumps: dict[str, Path], tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The API whose file is gone gets a SKIP row naming the file, every other API is judged as in the
    full dump, and the command ends with exit 2."""
    import shutil

    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "full")) == 0
    full = {r["API name"]: r for r in _rows(_one(tmp_path / "full", "accuracy_checking_result_*.csv"))}
    copy = tmp_path / "dump"
    shutil.copytree(dumps["fp32"].parent, copy)
    missing = copy / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt"
    missing.unlink()
    assert _cli("-api_info", str(copy / "dump.json"), "-o", str(tmp_path / "o")) == 2
    rows = {r["API name"]: r for r in _rows(_one(tmp_path / "o", "accuracy_checking_result_*.csv"))}
    assert list(rows) == list(full) == _forward_names(dumps["fp32"])
    gelu = rows.pop("Functional.gelu.0")
    assert (gelu["Forward Test Success"], gelu["Backward Test Success"]) == ("SKIP", "SKIP")
    assert str(missing) in gelu["Message"] and "missing" in gelu["Message"]
    del full["Functional.gelu.0"]
    assert {n: (r["Forward Test Success"], r["Backward Test Success"]) for n, r in rows.items()} == \
        {n: (r["Forward Test Success"], r["Backward Test Success"]) for n, r in full.items()}
    details = {d["API Name"] for d in _rows(_one(tmp_path / "o", "accuracy_checking_details_*.csv"))}
    assert "Functional.linear.1.forward.output.0" in details and not any(n.startswith("Functional.gelu.0.")
                                                                         for n in details)
    summary = json.loads(_one(tmp_path / "o", "accuracy_checking_summary_*.json").read_text())
    assert [e["api"] for e in summary["input_errors"]] == ["Functional.gelu.0"]
    assert str(missing) in summary["input_errors"][0]["message"]
    assert "Functional.gelu.0.forward.input.0.pt" in caplog.text and "not checked" in caplog.text


def test_bad_device_exits_2(dumps: dict[str, Path], tmp_path: Path) -> None:
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path), "-d", "cuda:99") == 2


def test_save_error_data_goes_to_the_config_error_data_path(dumps: dict[str, Path], tmp_path: Path) -> None:
    from msprobe.pytorch.run_ut.replay import error_data_dir, load_run_ut_section

    target = tmp_path / "errors"
    config = _config(tmp_path, {"error_data_path": str(target), "white_list": ["gelu"]})
    section = load_run_ut_section(config)
    assert section.error_data_path == str(target) and section.white_list == ("gelu",)
    assert load_run_ut_section(_config(tmp_path, {})).error_data_path is None  # default "./": under -o
    assert error_data_dir(tmp_path / "o", None) == tmp_path / "o" / "error_data"

    def wrong_gelu(*args, **kwargs):
        return F.gelu(*args, **kwargs) * 1.01

    run_ut(dumps["fp32"], tmp_path / "o", save_error_data=True, error_data_path=section.error_data_path,
           white_list=section.white_list, api_override={"Functional.gelu": wrong_gelu})
    saved = target / "Functional.gelu.0"
    assert (saved / "input.0.pt").is_file() and (saved / "bench_output.0.pt").is_file()
    assert not (tmp_path / "o" / "error_data").exists()


def test_list_names_are_checked_with_hints(dumps: dict[str, Path], tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, {"white_list": ["lineer", "Functional.softmax"], "black_list": ["gelu_x"]})
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "o"), "-config", str(config)) == 2
    assert "run_ut.white_list" in caplog.text and "'lineer'; did you mean 'linear'" in caplog.text
    assert not list((tmp_path / "o").glob("*.csv"))  # checked before any work
    config = _config(tmp_path, {"black_list": ["gelu_x"]})
    assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path / "o"), "-config", str(config)) == 2
    assert "run_ut.black_list" in caplog.text and "'gelu_x'" in caplog.text


def test_device_ids_as_111_spells_them(dumps: dict[str, Path], tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    from msprobe.pytorch.run_ut.command import device_name

    assert device_name("cpu") == "cpu" and device_name("npu:1") == "npu:1"
    assert device_name("3") == ("npu:3" if importlib.util.find_spec("torch_npu") else "cuda:3")
    if not torch.cuda.is_available():
        assert _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path), "-d", "0") == 2
        assert "cuda:0: no such CUDA device" in caplog.text
    with pytest.raises(SystemExit) as exc:
        _cli("-api_info", str(dumps["fp32"]), "-o", str(tmp_path), "-d", "cpu", "cpu")
    assert exc.value.code == 2


def test_details_csv_has_the_columns_of_msprobe_111(dumps: dict[str, Path], tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "run_ut_111" / "npu"
    with open(next(data.glob("accuracy_checking_details_*.csv")), encoding="utf-8-sig", newline="") as handle:
        theirs = next(csv.reader(handle))
    assert _cli("-api_info", str(dumps["bf16"]), "-o", str(tmp_path)) == 0
    details = _one(tmp_path, "accuracy_checking_details_*.csv")
    with open(details, encoding="utf-8-sig", newline="") as handle:
        ours = next(csv.reader(handle))
    assert ours[: len(theirs)] == theirs  # 1.1.1's 23 columns first, in its order; ours after
    from msprobe.core.run_ut.precision_compare import REQUIRED_COLUMNS

    numbers = REQUIRED_COLUMNS[2:]  # what 1.1.1's stage 2 reads, past the name and the dtype
    floats = [row for row in _rows(details) if row["DEVICE Dtype"] in ("torch.bfloat16", "torch.float32")]
    assert floats and len(numbers) == 12
    for row in floats:  # every float row holds the numbers of every standard (1.1.1 picks its own)
        assert all(float(row[column]) >= 0 for column in numbers), row


def test_memory_format_arguments_are_rebuilt_on_replay(tmp_path: Path) -> None:
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "dump"))
    x = torch.randn(2, 3, 4, 5)
    debugger.start()
    torch.ones_like(x, memory_format=torch.preserve_format)
    x.to(memory_format=torch.channels_last).mul(2.0)
    debugger.stop()
    debugger.step()
    dump_json = _one(tmp_path / "dump", "step0/rank/dump.json")
    assert _cli("-api_info", str(dump_json), "-o", str(tmp_path / "out")) == 0
    result = _one(tmp_path / "out", "accuracy_checking_result_*.csv")
    rows = {r["API name"]: r for r in _rows(result)}
    assert rows["Torch.ones_like.0"]["Forward Test Success"] == "pass"
    assert rows["Tensor.to.0"]["Forward Test Success"] == "pass"
    # no backward recorded: a blank cell, as 1.1.1 writes it
    assert rows["Torch.ones_like.0"]["Backward Test Success"] == " "
    assert "Torch.ones_like.0,pass, ," in result.read_text(encoding="utf-8-sig")


def _tensor_111(dtype: str, shape: list[int], high: float, low: float, mean: float, norm: float) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": high, "Min": low, "Mean": mean,
            "Norm": norm, "requires_grad": False}


_X_111 = _tensor_111("torch.float32", [2, 3, 4, 5], 3.4105026721954346, -2.6133224964141846, 0.02979562245309353,
                     11.3303861618042)
# Entries of a statistics L1 dump written by msprobe 1.1.1 itself (mindstudio-probe 1.1.1, torch 2.13 CPU) of
# torch.ones_like(x, dtype=torch.float16, device=torch.device("cpu"), layout=torch.strided,
# memory_format=torch.preserve_format), torch.sum(x, dim=1, dtype=torch.float64), F.softmax(x, dim=-1,
# dtype=torch.float64), torch.full((2, 3), 1.5, dtype=torch.float64, layout=torch.strided, device="cpu"),
# x.reshape(torch.Size([6, 20])), torch.bernoulli(p, generator=g) and torch.arange(6, dtype=torch.float32,
# device="cpu"): the argument forms as written (a torch.device as "cpu:None", a layout and a Generator as
# null, torch.Size typed); the tensors' statistics as written, outputs left out.
DUMP_111_ARGUMENTS = {
    "Torch.ones_like.0.forward": {"input_args": [_X_111], "input_kwargs": {
        "dtype": {"type": "torch.dtype", "value": "torch.float16"},
        "device": {"type": "torch.device", "value": "cpu:None"}, "layout": None,
        "memory_format": {"type": "torch.memory_format", "format": "preserve_format"}}},
    "Torch.sum.0.forward": {"input_args": [_X_111], "input_kwargs": {
        "dim": {"type": "int", "value": 1}, "dtype": {"type": "torch.dtype", "value": "torch.float64"}}},
    "Functional.softmax.0.forward": {"input_args": [_X_111], "input_kwargs": {
        "dim": {"type": "int", "value": -1}, "dtype": {"type": "torch.dtype", "value": "torch.float64"}}},
    "Torch.full.0.forward": {
        "input_args": [[{"type": "int", "value": 2}, {"type": "int", "value": 3}], {"type": "float", "value": 1.5}],
        "input_kwargs": {"dtype": {"type": "torch.dtype", "value": "torch.float64"}, "layout": None,
                         "device": {"type": "torch.device", "value": "cpu"}}},
    "Tensor.reshape.0.forward": {"input_args": [_X_111, {"type": "torch.Size", "value": [6, 20]}],
                                 "input_kwargs": {}},
    "Torch.bernoulli.0.forward": {
        "input_args": [_tensor_111("torch.float32", [2, 3], 0.7682217955589294, 0.08847743272781372,
                                   0.4044146239757538, 1.1654441356658936)],
        "input_kwargs": {"generator": None}},
    "Torch.arange.0.forward": {"input_args": [{"type": "int", "value": 6}], "input_kwargs": {
        "dtype": {"type": "torch.dtype", "value": "torch.float32"},
        "device": {"type": "torch.device", "value": "cpu"}}},
}


def dump_111(folder: Path) -> Path:
    """A dump.json holding :data:`DUMP_111_ARGUMENTS` (task statistics, as 1.1.1 heads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_data_dir": None,
                                "data": DUMP_111_ARGUMENTS}, indent=1))
    return path


def test_argument_forms_of_a_111_dump_are_rebuilt(tmp_path: Path) -> None:
    assert _cli("-api_info", str(dump_111(tmp_path / "dump")), "-o", str(tmp_path / "out")) == 0
    rows = {r["API name"]: r for r in _rows(_one(tmp_path / "out", "accuracy_checking_result_*.csv"))}
    assert list(rows) == [n.removesuffix(".forward") for n in DUMP_111_ARGUMENTS]
    assert "random API" in rows.pop("Torch.bernoulli.0")["Message"]  # skipped as random, not for its generator
    assert {(r["Forward Test Success"], r["Backward Test Success"], r["Message"]) for r in rows.values()} == \
        {("pass", " ", "")}
    details = {d["API Name"]: d for d in _rows(_one(tmp_path / "out", "accuracy_checking_details_*.csv"))}

    def out(api: str) -> tuple[str, str, str]:
        row = details[f"{api}.forward.output.0"]
        return row["DEVICE Dtype"], row["Bench Dtype"], row["Shape"]

    # the recorded dtype, layout and memory format reached the API: its outputs are what the dump recorded
    assert out("Torch.ones_like.0") == ("torch.float16", "torch.float32", "(2, 3, 4, 5)")
    assert out("Torch.sum.0") == ("torch.float64", "torch.float64", "(2, 4, 5)")
    assert out("Functional.softmax.0") == ("torch.float64", "torch.float64", "(2, 3, 4, 5)")
    assert out("Torch.full.0") == ("torch.float64", "torch.float64", "(2, 3)")
    assert out("Tensor.reshape.0") == ("torch.float32", "torch.float64", "(6, 20)")
    assert out("Torch.arange.0") == ("torch.float32", "torch.float64", "(6,)")


def test_resume_reads_a_result_csv_with_our_old_no_backward_cell(tmp_path: Path) -> None:
    """Earlier versions wrote N/A where 1.1.1 writes ' ': such a CSV resumes; its rows stay as they are."""
    dump = dump_111(tmp_path / "dump")
    assert _cli("-api_info", str(dump), "-o", str(tmp_path / "o")) == 0
    result = _one(tmp_path / "o", "accuracy_checking_result_*.csv")
    full = _rows(result)
    lines = result.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    old = [line.replace(",pass, ,", ",pass,N/A,") for line in lines[:3]]
    result.write_text("\ufeff" + "".join(old), encoding="utf-8")
    assert _cli("-api_info", str(dump), "-csv_path", str(result)) == 0
    resumed = _rows(result)
    assert [r["API name"] for r in resumed] == [r["API name"] for r in full]
    assert [r["Backward Test Success"] for r in resumed[:2]] == ["N/A", "N/A"]
    assert [r["Backward Test Success"] for r in resumed[2:]] == [" "] * (len(full) - 2)
    summary = json.loads(_one(tmp_path / "o", "accuracy_checking_summary_*.json").read_text())
    assert summary["apis"] == len(full) - 2 and summary["backward"] == {"N/A": len(full) - 2}
