"""anomaly_origin over the three dump layouts (this project's, msprobe 1.1.1's, 26.2.0's proc{pid}) and over
hand-built multi-rank steps whose inf/NaN travels through collectives (docs/anomaly_origin.md)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from msprobe.core.anomaly import AnomalyError, find_origins, read_step
from msprobe.core.cli import main

DATA = Path(__file__).parents[2] / "data"
NAN = float("nan")


def _bad(value) -> bool:
    """Independent reference: any Max/Min/Mean/Norm anywhere in ``value`` that is not a finite number."""
    if isinstance(value, dict):
        own = [value[k] for k in ("Max", "Min", "Mean", "Norm") if k in value]
        return any(isinstance(v, float) and not math.isfinite(v) for v in own) or any(
            _bad(v) for k, v in value.items() if k not in ("Max", "Min", "Mean", "Norm"))
    return isinstance(value, list) and any(_bad(v) for v in value)


def _first_origin_by_brute_force(dump_json: Path) -> str:
    """The first API entry (modules skipped) holding inf/NaN anywhere, whose inputs are finite."""
    for name, entry in json.loads(dump_json.read_text())["data"].items():
        if name.startswith("Module."):
            continue
        inputs = [entry.get(k) for k in ("input_args", "input_kwargs", "input")]
        if _bad(inputs) or _bad(entry.get("output")):
            assert not _bad(inputs), f"{name}: inputs already non-finite"
            return name
    raise AssertionError("no inf/NaN in the dump")


def test_msprobe_262_proc_layout_and_grouped_stacks():
    step = DATA / "anomaly" / "up262_step0"
    origins = find_origins(read_step(step))
    expected = _first_origin_by_brute_force(next(step.glob("proc*/dump.json")))
    assert [(o.rank, o.entry, o.kind) for o in origins] == [(0, expected, "produced")]
    assert expected == "Torch.log.0.forward"  # make_up262_dump.py plants the log of a negative tensor
    assert "h = torch.log(h - 1.0)" in origins[0].as_json()["stack_line"]


def test_msprobe_111_bare_rank_layout(tmp_path):
    rank_dir = tmp_path / "step0" / "rank"
    shutil.copytree(DATA / "graph_111" / "overflow_mix", rank_dir, ignore=shutil.ignore_patterns("*.py"))
    origins = find_origins(read_step(tmp_path / "step0"))
    assert origins[0].entry == _first_origin_by_brute_force(rank_dir / "dump.json")
    assert origins[0].kind == "produced" and "1e38 * 100" in origins[0].as_json()["stack_line"]


def _tensor(value: float) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": value, "Min": value,
            "Mean": value, "Norm": value, "requires_grad": False}


def _int(value: int) -> dict:
    return {"type": "int", "value": value}


def _entry(inputs: list, outputs: list) -> dict:
    return {"input_args": inputs, "input_kwargs": {}, "output": outputs}


def _write_step(root: Path, ranks: dict[int, dict[str, dict]]) -> Path:
    for rank, data in ranks.items():
        directory = root / "step0" / f"rank{rank}"
        directory.mkdir(parents=True)
        (directory / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
        (directory / "stack.json").write_text(json.dumps({name: [f"File t.py, line {i}, in f, \n x"]
                                                         for i, name in enumerate(data)}))
    return root / "step0"


def test_nan_sent_point_to_point_then_all_reduced_is_traced_to_its_maker(tmp_path):
    """rank 2 makes NaN, sends it to rank 1, which all_reduces it with rank 0: every rank's first
    non-finite value leads back to rank 2's exp, not to a collective."""
    step = _write_step(tmp_path, {
        0: {"Torch.mul.0.forward": _entry([_tensor(1.0)], [_tensor(2.0)]),
            "Distributed.all_reduce.0.forward": _entry([_tensor(2.0)], [_tensor(NAN)])},
        1: {"Distributed.recv.0.forward": _entry([_tensor(0.0), _int(2)], [_tensor(NAN)]),
            "Distributed.all_reduce.0.forward": _entry([_tensor(NAN)], [_tensor(NAN)])},
        2: {"Torch.exp.0.forward": _entry([_tensor(100.0)], [_tensor(math.inf)]),
            "Torch.sub.0.forward": _entry([_tensor(math.inf)], [_tensor(NAN)]),
            "Distributed.send.0.forward": _entry([_tensor(NAN), _int(1)], [_tensor(NAN)])},
    })
    origins = find_origins(read_step(step))
    assert [(o.rank, o.entry, o.kind) for o in origins] == [(2, "Torch.exp.0.forward", "produced")]
    assert "rank 0 Distributed.all_reduce.0.forward" in origins[0].via
    assert "rank 1 Distributed.recv.0.forward" in origins[0].via


def test_collective_with_no_rank_that_fed_it_is_named_as_where_it_arrived(tmp_path):
    step = _write_step(tmp_path, {
        0: {"Distributed.all_reduce.0.forward": _entry([_tensor(1.0)], [_tensor(math.inf)])},
        1: {"Distributed.all_reduce.0.forward": _entry([_tensor(1.0)], [_tensor(math.inf)])},
    })
    assert {(o.rank, o.kind) for o in find_origins(read_step(step))} == {(0, "arrived"), (1, "arrived")}


def test_non_finite_data_is_named_where_first_seen_and_earlier_epoch_wins(tmp_path):
    step = _write_step(tmp_path, {
        0: {"Distributed.all_reduce.0.forward": _entry([_tensor(1.0)], [_tensor(2.0)]),
            "Torch.div.0.forward": _entry([_tensor(1.0)], [_tensor(math.inf)])},
        1: {"Torch.add.0.forward": _entry([_tensor(NAN)], [_tensor(NAN)]),
            "Distributed.all_reduce.0.forward": _entry([_tensor(1.0)], [_tensor(2.0)])},
    })
    origins = find_origins(read_step(step))
    assert [(o.rank, o.entry, o.kind) for o in origins] == [
        (1, "Torch.add.0.forward", "input"), (0, "Torch.div.0.forward", "produced")]


def test_clean_step_reports_nothing_and_cli_writes_the_report(tmp_path, capsys):
    step = _write_step(tmp_path, {0: {"Torch.mul.0.forward": _entry([_tensor(1.0)], [_tensor(2.0)])}})
    assert main(["anomaly_origin", "-i", str(step), "-o", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "anomaly_origin.json").read_text())
    assert report["found"] is False and report["origins"] == []
    assert "no inf/NaN" in capsys.readouterr().out


def test_overflow_check_alias_names_the_origin(tmp_path, capsys):
    assert main(["-f", "pytorch", "overflow_check", "-i", str(DATA / "anomaly" / "up262_step0"),
                 "-o", str(tmp_path)]) == 0
    assert "rank 0: Torch.log.0.forward turned finite inputs into inf/NaN" in capsys.readouterr().out
    assert json.loads((tmp_path / "anomaly_origin.json").read_text())["first"]["entry"] == "Torch.log.0.forward"


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(AnomalyError, match="is not a directory"):
        read_step(tmp_path / "missing")
    with pytest.raises(AnomalyError, match="no rank\\*/ or proc\\*/ directory"):
        read_step(tmp_path)
    md5 = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "md5": "00000000"}
    step = _write_step(tmp_path, {0: {"Torch.mul.0.forward": _entry([md5], [md5])}})
    with pytest.raises(AnomalyError, match="summary_mode statistics"):
        find_origins(read_step(step))
    assert main(["anomaly_origin", "-i", str(tmp_path / "missing"), "-o", str(tmp_path / "o")]) == 2
    assert "is not a directory" in capsys.readouterr().out
