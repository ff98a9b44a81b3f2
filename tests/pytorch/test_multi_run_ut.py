"""``msprobe -f pytorch multi_run_ut``: the merged report equals ``run_ut``'s on the same dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_run_ut import _config, _dump, _forward_names, _one, _rows, dump_111

from msprobe.core import cli
from msprobe.core.run_ut.parallel import split_parts


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _dump(tmp_path_factory.mktemp("multi_run_ut_dump"), "tensor")


def _main(command: str, *argv: str) -> int:
    return cli.main(["-f", "pytorch", command, *argv])


def _report(folder: Path) -> tuple[list[dict[str, str]], list[dict[str, str]], dict]:
    return (_rows(_one(folder, "accuracy_checking_result_*.csv")),
            _rows(_one(folder, "accuracy_checking_details_*.csv")),
            json.loads(_one(folder, "accuracy_checking_summary_*.json").read_text()))


def test_split_parts() -> None:
    assert split_parts(list("abcde"), 2) == [["a", "b", "c"], ["d", "e"]]
    assert split_parts(list("ab"), 8) == [["a"], ["b"]]
    assert split_parts([], 4) == [[]]


_TEXT = ("API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "Status", "Standard", "Stage1 Status")


def _without_numbers(row: dict) -> dict:
    return {key: row[key] for key in _TEXT}  # the numbers, and the messages quoting them, may differ


def test_two_parts_give_run_ut_rows(dump: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, {"black_list": ["softmax"]})
    common = ("-api_info", str(dump), "-f", "-config", str(config), "-save_error_data")
    assert _main("run_ut", *common, "-o", str(tmp_path / "single")) == 0
    assert _main("multi_run_ut", *common, "-o", str(tmp_path / "multi"), "-n", "2") == 0
    single, multi = _report(tmp_path / "single"), _report(tmp_path / "multi")
    # same rows, same order, same statuses. Not the same error measures: the parts are fresh processes,
    # whose thread count can differ from this one's (other tests in this process may change it), and
    # with it the order of an fp32 reduction — the measured errors are themselves rounding noise.
    assert multi[0] == single[0]
    assert [_without_numbers(row) for row in multi[1]] == [_without_numbers(row) for row in single[1]]
    names = [r["API name"] for r in multi[0]]
    assert names == [n for n in _forward_names(dump) if n in names] and len(names) >= 6
    assert "Functional.linear.1" not in names and "Torch.softmax.0" not in names  # -f and the black list
    assert _one(tmp_path / "multi", "accuracy_checking_details_*.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    for key in ("apis", "forward", "backward", "failures", "checked", "task", "filter_duplicates", "black_list"):
        assert multi[2][key] == single[2][key], key
    assert multi[2]["parts"] == 2
    assert [p.name for p in (tmp_path / "multi").iterdir() if p.name.startswith(".")] == []  # parts removed


def test_nothing_checked_exits_1(dump: Path, tmp_path: Path) -> None:
    only_dropout = _config(tmp_path, {"white_list": ["dropout"]})
    assert _main("multi_run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-config",
                 str(only_dropout), "-n", "2") == 1


@pytest.mark.parametrize("parts", ["0", "65", "x"])
def test_bad_part_count_is_a_usage_error(dump: Path, tmp_path: Path, parts: str) -> None:
    with pytest.raises(SystemExit) as exc:
        _main("multi_run_ut", "-api_info", str(dump), "-o", str(tmp_path), "-n", parts)
    assert exc.value.code == 2


def test_missing_dump_exits_2(tmp_path: Path) -> None:
    assert _main("multi_run_ut", "-api_info", str(tmp_path / "none.json"), "-o", str(tmp_path)) == 2


def test_resume_appends_to_the_result_csv(dump: Path, tmp_path: Path) -> None:
    assert _main("run_ut", "-api_info", str(dump), "-o", str(tmp_path)) == 0
    result = _one(tmp_path, "accuracy_checking_result_*.csv")
    full = _rows(result)
    lines = result.read_text(encoding="utf-8").splitlines(keepends=True)
    result.write_text("".join(lines[:4]), encoding="utf-8")  # header + 3 APIs: "interrupted"
    details = _one(tmp_path, "accuracy_checking_details_*.csv")
    full_details = [r["API Name"] for r in _rows(details)]
    assert _main("multi_run_ut", "-api_info", str(dump), "-csv_path", str(result), "-n", "2") == 0
    assert _rows(result) == full
    assert [r["API Name"] for r in _rows(details)] == full_details  # trimmed, then appended: no duplicate
    assert len(list(tmp_path.glob("accuracy_checking_result_*.csv"))) == 1
    summary = json.loads(_one(tmp_path, "accuracy_checking_summary_*.json").read_text())
    assert summary["apis"] == len(full) - 3 and summary["parts"] == 2


def test_missing_tensor_file_is_a_skip_row_and_exit_2(dump: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    import shutil

    copy = tmp_path / "dump"
    shutil.copytree(dump.parent, copy)
    missing = copy / "dump_tensor_data" / "Tensor.sum.0.forward.input.0.pt"
    missing.unlink()  # the last API: part 1 of 2
    assert _main("multi_run_ut", "-api_info", str(copy / "dump.json"), "-o", str(tmp_path / "o"), "-n", "2") == 2
    rows, _, summary = _report(tmp_path / "o")
    assert [r["API name"] for r in rows] == _forward_names(dump)  # every API has its row, in the dump's order
    last = rows[-1]
    assert (last["API name"], last["Forward Test Success"]) == ("Tensor.sum.0", "SKIP")
    assert str(missing) in last["Message"]
    assert sum(r["Forward Test Success"] == "pass" for r in rows) >= 8  # both parts' other APIs were judged
    assert [e["api"] for e in summary["input_errors"]] == ["Tensor.sum.0"] and summary["checked"] >= 8
    assert "Tensor.sum.0.forward.input.0.pt" in caplog.text and "not checked" in caplog.text
    assert not list((tmp_path / "o").glob(".multi_run_ut_*"))  # the parts' folder is removed


def test_no_backward_cell_is_111s_and_old_cells_are_read(tmp_path: Path) -> None:
    """Resuming a result CSV whose rows say N/A (our earlier spelling of "no backward") keeps those rows;
    the merged parts write ' ' (as 1.1.1) and the summary counts both as N/A."""
    dump = dump_111(tmp_path / "dump")
    assert _main("run_ut", "-api_info", str(dump), "-o", str(tmp_path)) == 0
    result = _one(tmp_path, "accuracy_checking_result_*.csv")
    single = _rows(result)
    assert {r["Backward Test Success"] for r in single} == {" "}
    lines = result.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    result.write_text("\ufeff" + "".join(line.replace(", ,", ",N/A,") for line in lines[:3]), encoding="utf-8")
    assert _main("multi_run_ut", "-api_info", str(dump), "-csv_path", str(result), "-n", "2") == 0
    resumed = _rows(result)
    assert [r["API name"] for r in resumed] == [r["API name"] for r in single]
    assert [r["Backward Test Success"] for r in resumed] == ["N/A"] * 2 + [" "] * (len(resumed) - 2)
    assert [r["Forward Test Success"] for r in resumed] == [r["Forward Test Success"] for r in single]
    summary = json.loads(_one(tmp_path, "accuracy_checking_summary_*.json").read_text())
    assert summary["parts"] == 2 and summary["backward"] == {"N/A": len(resumed) - 2}
