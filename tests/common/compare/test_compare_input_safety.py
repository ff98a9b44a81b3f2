"""Bad input to compare: worker counts, hostile JSON, names that try to escape their CSV/HTML/log context,
tensor files that claim more than they hold. Real files in tmp_path, through the ``msprobe`` command."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from msprobe.core import cli
from msprobe.core.compare import CompareError
from msprobe.core.compare.read.tensorfile import TensorFileError, TensorSpec, load_npy
from msprobe.core.config import ConfigError, load_config
from msprobe.core.services.jsonfile import JsonFileError, load_json_file

needs_compare_command = pytest.mark.frameworks("pytorch")  # the compare command comes with a framework

CPUS = os.cpu_count() or 1


def stat(values: list[float]) -> dict:
    a = np.asarray(values, np.float64)
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [len(values)], "Max": a.max(),
            "Min": a.min(), "Mean": a.mean(), "Norm": float(np.linalg.norm(a))}


def stats_dump(root: Path, calls: dict[str, tuple[list[float], list[float]]]) -> Path:
    """A statistics dump.json (and stack.json) of ``entry: (input values, output values)``."""
    root.mkdir(parents=True)
    data = {entry: {"input_args": [stat(i)], "output": [stat(o)]} for entry, (i, o) in calls.items()}
    (root / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    (root / "stack.json").write_text(json.dumps({e: [f"File model.py, line {n}, in forward, \n y = f(x)"]
                                                 for n, e in enumerate(calls)}))
    return root / "dump.json"


def config_for(tmp_path: Path, npu: Path, bench: Path) -> Path:
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    return path


def run(config: Path, out: Path, *extra: str) -> int:
    return cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(out), *extra])


@pytest.fixture
def pair(tmp_path) -> Path:
    calls = {"Torch.add.0.forward": ([1.0, -0.5, 2.0], [2.0, 0.5, 3.0])}
    return config_for(tmp_path, stats_dump(tmp_path / "npu", calls), stats_dump(tmp_path / "bench", calls))


@needs_compare_command
@pytest.mark.parametrize("workers", ["0", "-3", "100000", str(CPUS + 1), "two"])
def test_worker_counts_outside_1_to_the_cpus_are_a_usage_error(pair, tmp_path, capsys, workers):
    with pytest.raises(SystemExit) as exit_info:
        run(pair, tmp_path / "out", "-j", workers)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"workers (-j) is {workers if workers == 'two' else int(workers)!r}" in error
    assert f"allowed: an integer from 1 to {CPUS}" in error and not (tmp_path / "out").exists()


@needs_compare_command
def test_worker_counts_in_range_and_from_python(pair, tmp_path):
    assert run(pair, tmp_path / "out", "-j", str(CPUS)) == 0
    from msprobe.pytorch.compare import compare

    settings = json.loads(pair.read_text())
    with pytest.raises(CompareError, match=r"workers \(-j\) is 0"):
        compare(settings, tmp_path / "api", workers=0)


HOSTILE = {
    "deep": lambda: '{"task": "statistics", "data": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    "nested": lambda: '{"task": "statistics", "data": {"a": ' + "[" * 150 + "]" * 150 + "}}",
    "huge integer": lambda: '{"task": "statistics", "data": {"a": {"x": ' + "9" * 5000 + "}}}",
}
REASONS = {"deep": "nests arrays or objects too deeply", "nested": "nests arrays or objects more than 100 levels",
           "huge integer": "holds an integer of more than 4300 digits"}


@needs_compare_command
@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_dump_json_is_one_error_line_naming_the_file(pair, tmp_path, kind, msprobe_log):
    settings = json.loads(pair.read_text())
    Path(settings["npu_path"]).write_text(HOSTILE[kind]())
    assert run(pair, tmp_path / "out") == 2
    [error] = [m for m in msprobe_log.messages if m.startswith("compare:")]
    assert error.startswith(f"compare: npu_path {settings['npu_path']!r} {REASONS[kind]}")
    assert "\n" not in error and not (tmp_path / "out").exists()


@needs_compare_command
def test_hostile_json_from_the_command_line_has_no_traceback(pair, tmp_path):
    pair.write_text(HOSTILE["deep"]())
    done = subprocess.run([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "compare", "-i", str(pair), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert f"compare input file {str(pair)!r} nests arrays or objects too deeply" in line


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_config_json_is_a_config_error_naming_the_file(tmp_path, kind):
    path = tmp_path / "config.json"
    path.write_text(HOSTILE[kind]().replace('"data"', '"statistics"'))
    with pytest.raises(ConfigError) as error:
        load_config(path, framework="pytorch")
    assert str(error.value).startswith(f"config file {path}: {REASONS[kind]}")


def test_the_shared_loader_caps_the_size_and_refuses_what_is_not_a_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"x": "y" * 100}))
    assert load_json_file(path, 1000) == {"x": "y" * 100}
    with pytest.raises(JsonFileError, match=r"is 109 bytes, more than the 100 bytes allowed"):
        load_json_file(path, 100)
    with pytest.raises(JsonFileError, match="is a directory"):
        load_json_file(tmp_path, 1000)
    with pytest.raises(JsonFileError, match="does not exist"):
        load_json_file(tmp_path / "none.json", 1000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(JsonFileError, match="is not a regular file"):  # not opened: it would block
        load_json_file(fifo, 1000)


NAMES = {  # the first is the first divergence, so it reaches that log line
    "log": "Torch.evil\n[msprobe] 2026-01-01 00:00:00 ERROR: forged line\x1b[31m.0.forward",
    "formula": "=HYPERLINK(\"http://evil\",\"x\").0.forward",
    "plus": "+cmd|' /C calc'!A0.0.forward",
    "at": "@SUM(A1).0.forward",
    "script": "Torch.x</script><script>alert(1)</script><!--<script>.0.forward",
}


@pytest.fixture
def hostile_names(tmp_path) -> Path:
    """Every hostile name diverges (output ×3), so each reaches the log line of the first divergence or the
    optimizer, the HTML's sections, its script literal and the CSV."""
    bench = {name: ([1.0, -0.5, 2.0], [2.0, -0.5, 3.0]) for name in NAMES.values()}
    npu = {name: (i, [v * 3 for v in o]) for name, (i, o) in bench.items()}
    return config_for(tmp_path, stats_dump(tmp_path / "npu", npu), stats_dump(tmp_path / "bench", bench))


@needs_compare_command
def test_csv_cells_that_a_spreadsheet_would_run_are_quoted_numbers_stay_numbers(hostile_names, tmp_path):
    assert run(hostile_names, tmp_path / "out") == 0
    [path] = (tmp_path / "out").glob("*.csv")
    rows = list(csv.reader(path.open()))
    names = {row[0] for row in rows[1:]}
    for name in (NAMES["formula"], NAMES["plus"], NAMES["at"]):
        assert f"'{name}.output.0" in names and f"{name}.output.0" not in names
    assert not [cell for row in rows for cell in row if cell[:1] in ("=", "+", "@")]
    header = rows[0]
    mins = [row[header.index("NPU min")] for row in rows[1:]]
    assert "-1.5" in mins and "-0.5" in mins  # negative numbers are written as numbers, unquoted


@needs_compare_command
def test_html_escapes_names_in_text_and_in_its_script(hostile_names, tmp_path):
    assert run(hostile_names, tmp_path / "out") == 0
    [path] = (tmp_path / "out").glob("*.html")
    page = path.read_text()
    assert page.count("<script>") == 1 and page.count("</script>") == 1 and "<!--" not in page
    literal = page.split("const DATA = ", 1)[1].split(";\nconst cols", 1)[0]
    assert "<" not in literal and ">" not in literal
    assert f"{NAMES['script']}.output.0" in {row["c"][0] for row in json.loads(literal)["rows"]}
    assert "Torch.x&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--&lt;script&gt;" in page


@needs_compare_command
def test_log_lines_show_control_characters_escaped(hostile_names, tmp_path, msprobe_log):
    assert run(hostile_names, tmp_path / "out") == 0
    assert all("\n" not in m and "\x1b" not in m for m in msprobe_log.messages)
    logged = msprobe_log.text()
    assert "Torch.evil\\n[msprobe] 2026-01-01 00:00:00 ERROR: forged line\\x1b[31m.0.forward" in logged


def test_npy_headers_are_checked_before_any_data_is_read(tmp_path):
    path = tmp_path / "big.npy"
    with open(path, "wb") as handle:  # a header claiming 10^10 float32 elements, followed by 8 bytes
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (100_000, 100_000)})
        handle.write(b"\0" * 8)
    tracemalloc.start()
    try:
        with pytest.raises(TensorFileError, match="needs 10000000000 elements but the file stores 2"):
            load_npy(path, TensorSpec((100_000, 100_000), "torch.float32"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    np.save(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert load_npy(path, TensorSpec((2, 3), "BFloat16")).shape == (2, 3)  # MindSpore saves bf16 as float32
    assert load_npy(path, TensorSpec((6,), "Float32")).shape == (2, 3)  # the same elements
    with pytest.raises(TensorFileError, match=r"shape \[2, 3\] but dump.json records \[3, 3\]"):
        load_npy(path, TensorSpec((3, 3), "Float32"))
    with pytest.raises(TensorFileError, match="holds float32 data but dump.json records dtype Int64"):
        load_npy(path, TensorSpec((2, 3), "Int64"))
    np.save(path, np.array([{}, 1], dtype=object), allow_pickle=True)
    with pytest.raises(TensorFileError, match="holds Python objects"):
        load_npy(path, TensorSpec((2,), None))
