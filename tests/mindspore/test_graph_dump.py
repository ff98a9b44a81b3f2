"""MindSpore static graph at level L2: real GRAPH_MODE (and PyNative ``jit``) training on CPU, real kernel files.

MindSpore reads its dump configuration once per process, so each configuration trains in its own
subprocess; the three runs start together (module fixture) and the tests read what they left.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.config import ConfigError, load_debugger_config
from msprobe.mindspore.graph_dump import alias
from msprobe.mindspore.graph_dump import config as dump_config
from msprobe.mindspore.graph_dump.kernel_files import parse_kernel_file
from msprobe.mindspore.graph_dump.statistics import HEADER

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-outputs" / "mindspore" / "ms_g_tensor"
REFERENCE_FILE_NAMES = (  # written by MindSpore 2.10 on CPU under msprobe 1.1.1 (shared/reference-outputs)
    "MatMul.Default_MatMul-op0.0.0.1796205176395056.output.0.DefaultFormat.Float32.npy",
    "ReduceSum.Expand__SumExt_ReduceSum-op0.0.0.1796205176397792.input.2.DefaultFormat.Bool.npy",
    "Parameter.fc_bias.0.0.1796205176400950.output.0.DefaultFormat.Float32.npy",
    "ReluGrad.Gradients_Default_Grad_ReLU_ReluGrad-op1.0.0.1796205176398903.input.0.DefaultFormat.Float32.npy",
)
KERNEL_FILE_NAME = re.compile(r"[A-Za-z]+\.[^.]+\.\d+\.\d+\.\d+\.(input|output)\.\d+\.DefaultFormat\.[A-Za-z0-9]+\.npy")

TRAIN_SCRIPT = """
import json, sys
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from msprobe.mindspore import PrecisionDebugger

config_path, mode, net_kind = sys.argv[1:4]
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
debugger = PrecisionDebugger(config_path=config_path)  # before the network compiles


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)

    def construct(self, x):
        h = self.fc(x)
        if net_kind == "overflow":
            h = h * 1e20
            h = h * h  # 1e40 does not fit float32: the first kernel with an inf output
        return ops.relu(h).sum()


ms.set_seed(0)
net = Net()
optimizer = nn.SGD(net.trainable_params(), 0.1)
grad_fn = ms.value_and_grad(net, None, optimizer.parameters)


@ms.jit
def train_step(x):
    loss, grads = grad_fn(x)
    optimizer(grads)
    return loss


x = ms.Tensor(np.array([[1, 2, 3, 4], [-3, 0, 1, -2]], np.float32))
for _ in range(2):
    debugger.start(net)
    train_step(x)
    debugger.stop()
    debugger.step()
"""

RUNS = {  # name → (mode, net, config, environment, dump_path under the run's root)
    "tensor": ("graph", "plain", {"task": "tensor"}, {}, "tensor"),
    "filters": (
        "pynative",
        "plain",
        {
            "task": "statistics",
            "step": [1],
            "statistics": {"list": ["name-regex(Default/ReLU.*)", "Default/MatMul-op0"], "data_mode": ["output"]},
        },
        {},
        "filters",
    ),
    "overflow": (
        "graph",
        "overflow",
        {"task": "overflow_check", "overflow_check": {"overflow_nums": 1}},
        {},
        "overflow",
    ),
    # dump paths MindSpore itself rejects ("Dump path only support alphabets, digit or {'-', '_', '/'}")
    "tensor_dotted": ("graph", "plain", {"task": "tensor"}, {}, "a.b/dump"),
    "statistics_odd": ("graph", "plain", {"task": "statistics"}, {}, ".hidden/run 1+é/dump"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Train every configuration in its own process, all at once; name → (dump_path, stderr)."""
    root = tmp_path_factory.mktemp("graph_dump")
    script = root / "train.py"
    script.write_text(TRAIN_SCRIPT)
    started = {}
    for name, (mode, net_kind, config, env, relative_dump_path) in RUNS.items():
        dump_path = root / relative_dump_path
        config_file = root / f"{name}.json"
        config_file.write_text(json.dumps({"dump_path": str(dump_path), "level": "L2", **config}))
        environment = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)}
        environment.pop("MINDSPORE_DUMP_CONFIG", None)
        started[name] = (
            dump_path,
            subprocess.Popen(
                [sys.executable, str(script), str(config_file), mode, net_kind],
                cwd=root, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ),
        )  # fmt: skip
    finished = {}
    for name, (dump_path, process) in started.items():
        _, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, f"{name}: {stderr[-3000:]}"
        finished[name] = (dump_path, stderr)
    return finished


def read_statistic_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames) == HEADER
        return list(reader)


def kernel_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.npy"))


def without_timestamp(name: str) -> str:
    parsed = parse_kernel_file(Path(name))
    assert parsed is not None, name
    return f"{parsed.kernel}.{parsed.io}.{parsed.slot}"


# ---------------------------------------------------------------------------------------------- configuration
def test_iteration_text_and_support_device():
    assert dump_config.iteration_text(()) == "all"
    assert dump_config.iteration_text((0, 2, 3, 4, 7)) == "0|2-4|7"
    assert dump_config.support_device(()) == list(range(8))
    assert dump_config.support_device((3, 1)) == [1, 3]
    assert dump_config.support_device((1, 9)) == list(range(8))  # rank 9 is no device id: msprobe filters


def test_settings_match_the_reference_kernel_dump_config(tmp_path):
    config = load_debugger_config(REFERENCE / "config.json", framework="mindspore", dump_path=str(tmp_path))
    settings = dump_config.dump_settings(config, str(tmp_path / "k"), "CPU")
    reference = json.loads((REFERENCE / "kernel_kbyk_dump.json").read_text())
    reference["common_dump_settings"]["path"] = str(tmp_path / "k")
    assert settings == reference


def test_settings_from_list_step_data_mode_and_rank(tmp_path):
    raw = {
        "task": "statistics", "level": "L2", "dump_path": str(tmp_path), "step": ["1-3", 5], "rank": [2],
        "statistics": {"list": ["name-regex(Default/.+)", "Default/MatMul-op0"], "data_mode": ["output"]},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(raw))
    config = load_debugger_config(tmp_path / "c.json", framework="mindspore")
    common = dump_config.dump_settings(config, str(tmp_path / "k"), "CPU")["common_dump_settings"]
    assert common["dump_mode"] == 1 and common["kernels"] == raw["statistics"]["list"]
    assert (common["iteration"], common["input_output"], common["support_device"]) == ("1-3|5", 2, [2])
    assert common["saved_data"] == "tensor"  # CPU: MindSpore saves tensors only
    assert dump_config.dump_settings(config, str(tmp_path), "GPU")["common_dump_settings"]["saved_data"] == "statistic"


def test_overflow_check_uses_op_debug_mode_only_on_ascend(tmp_path):
    config = load_debugger_config(
        None, framework="mindspore", task="overflow_check", level="L2", dump_path=str(tmp_path)
    )
    assert "op_debug_mode" not in dump_config.dump_settings(config, str(tmp_path), "CPU")["common_dump_settings"]
    ascend = dump_config.dump_settings(config, str(tmp_path), "Ascend")["common_dump_settings"]
    assert (ascend["op_debug_mode"], ascend["input_output"]) == (3, 0)


def test_reference_file_names_parse():
    parsed = [parse_kernel_file(Path(name)) for name in REFERENCE_FILE_NAMES]
    assert [(p.op_type, p.op_name, p.timestamp, p.io, p.slot, p.dtype) for p in parsed] == [
        ("MatMul", "Default_MatMul-op0", 1796205176395056, "output", 0, "Float32"),
        ("ReduceSum", "Expand__SumExt_ReduceSum-op0", 1796205176397792, "input", 2, "Bool"),
        ("Parameter", "fc_bias", 1796205176400950, "output", 0, "Float32"),
        ("ReluGrad", "Gradients_Default_Grad_ReLU_ReluGrad-op1", 1796205176398903, "input", 0, "Float32"),
    ]
    assert all(KERNEL_FILE_NAME.fullmatch(name) for name in REFERENCE_FILE_NAMES)
    assert parse_kernel_file(Path("statistic.csv")) is None
    assert parse_kernel_file(Path("MatMul.Default_MatMul-op0.0.0.x.output.0.DefaultFormat.Float32.npy")) is None


# ---------------------------------------------------------------------------------------------- real training
@pytest.mark.parametrize("run", ["tensor", "tensor_dotted"])
def test_tensor_task_files_and_statistics_match_float64_of_the_kernel_tensors(runs, run):
    dump_path, _ = runs[run]
    assert not list((dump_path / "mindspore_dump").rglob("*.npy"))  # every kernel file was moved into a step
    kernels_per_step = []
    for step in (0, 1):
        graph_dir = dump_path / f"step{step}" / "rank" / "graph0"
        files = kernel_files(graph_dir)
        assert files and all(KERNEL_FILE_NAME.fullmatch(f.name) for f in files)
        rows = read_statistic_csv(graph_dir / "statistic.csv")
        assert len(rows) == len(files)
        by_timestamp = {parse_kernel_file(f).timestamp: f for f in files}
        for row in rows:
            values = np.load(by_timestamp[int(row["Timestamp"])])
            wide = values.astype(np.float64).reshape(-1)
            assert row["Data Type"] == values.dtype.name and row["Data Size"] == str(values.nbytes)
            assert row["Shape"] == "(" + ",".join(map(str, values.shape)) + ")"
            expected = (wide.max(), wide.min(), wide.mean(), math.sqrt(float(wide @ wide)))
            got = [float(row[k]) for k in ("Max Value", "Min Value", "Avg Value", "L2Norm Value")]
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)
        assert [int(r["Timestamp"]) for r in rows] == sorted(int(r["Timestamp"]) for r in rows)
        kernels_per_step.append(sorted(without_timestamp(f.name) for f in files))
    assert kernels_per_step[0] == kernels_per_step[1]
    assert "output.0" in " ".join(kernels_per_step[0]) and any("Gradients" in k for k in kernels_per_step[0])


def test_step_list_and_data_mode_filters_under_jit_in_pynative(runs):
    dump_path, stderr = runs["filters"]
    assert not (dump_path / "step0").exists() and "msprobe has finished" in stderr
    graph_dir = dump_path / "step1" / "rank" / "graph0"
    assert not kernel_files(graph_dir)  # statistics: tensors deleted once summarised
    rows = read_statistic_csv(graph_dir / "statistic.csv")
    kernels = {(r["Op Type"], r["Op Name"]) for r in rows}
    assert kernels == {("ReLU", "Default_ReLU-op0"), ("MatMul", "Default_MatMul-op0")}
    assert {r["IO"] for r in rows} == {"output"}


def test_overflow_names_the_first_non_finite_kernel(runs):
    dump_path, stderr = runs["overflow"]
    assert "the first origin in execution order is Mul.Default_Mul-op0 (output [0])" in stderr
    assert not (dump_path / "step1").exists()  # overflow_nums 1: stopped after the first overflowing step
    graph_dir = dump_path / "step0" / "rank" / "graph0"
    rows = read_statistic_csv(graph_dir / "statistic.csv")
    first_output = next(r for r in rows if r["IO"] == "output")
    assert (first_output["Op Name"], first_output["Max Value"]) == ("Default_Mul-op0", "inf")
    kept = {parse_kernel_file(f).kernel for f in kernel_files(graph_dir)}
    assert "Mul.Default_Mul-op0" in kept and "MatMul.Default_MatMul-op0" not in kept  # finite kernels dropped
    for kernel in kept:  # every kept kernel has a non-finite output
        outputs = [np.load(f) for f in graph_dir.glob(f"{kernel}.*.output.*.npy")]
        assert any(not np.isfinite(o).all() for o in outputs), kernel


# ---------------------------------------------------------------------------------------------- any dump_path
def mindspore_path(dump_path: Path) -> str:
    return json.loads((dump_path / "kernel_kbyk_dump.json").read_text())["common_dump_settings"]["path"]


def test_an_accepted_dump_path_is_given_to_mindspore_as_it_is(runs):
    dump_path, stderr = runs["tensor"]
    assert mindspore_path(dump_path) == str(dump_path / "mindspore_dump")
    assert "writes through the symlink" not in stderr


@pytest.mark.parametrize("run", ["tensor_dotted", "statistics_odd"])
def test_a_rejected_dump_path_is_reached_through_a_link_that_is_gone_after_the_run(runs, run):
    dump_path, stderr = runs[run]
    given = mindspore_path(dump_path)
    assert not alias.accepted_by_mindspore(str(dump_path)) and alias.accepted_by_mindspore(given)
    assert f"writes through the symlink {given} instead" in stderr
    # MindSpore read the process's own copy of its configuration, beside the link
    assert f"configured in {os.path.join(os.path.dirname(given), 'kernel_kbyk_dump.json')}" in stderr
    assert not os.path.lexists(given) and not os.path.lexists(os.path.dirname(given))  # removed at exit
    assert (dump_path / "mindspore_dump" / "rank_0").is_dir()  # MindSpore wrote into the dump_path itself
    assert not list((dump_path / "mindspore_dump").rglob("*.npy"))  # and every kernel file was filed


def test_statistics_under_a_hidden_folder_with_a_space(runs):
    dump_path, _ = runs["statistics_odd"]
    rows_per_step = []
    for step in (0, 1):
        graph_dir = dump_path / f"step{step}" / "rank" / "graph0"
        assert not kernel_files(graph_dir)  # statistics: the tensors were summarised and deleted
        rows_per_step.append(read_statistic_csv(graph_dir / "statistic.csv"))
    tensor_rows = read_statistic_csv(runs["tensor"][0] / "step0" / "rank" / "graph0" / "statistic.csv")
    kernels = [{(r["Op Name"], r["IO"], r["Slot"]) for r in rows} for rows in rows_per_step]
    assert kernels[0] == kernels[1] == {(r["Op Name"], r["IO"], r["Slot"]) for r in tensor_rows}
    same_seed = {(r["Op Name"], r["IO"], r["Slot"]): r["L2Norm Value"] for r in tensor_rows}
    assert {(r["Op Name"], r["IO"], r["Slot"]): r["L2Norm Value"] for r in rows_per_step[0]} == same_seed


def test_configerror_naming_mindspores_rule_when_no_link_can_be_made(tmp_path, monkeypatch):
    import mindspore as ms

    from msprobe.mindspore import PrecisionDebugger

    rejected = tmp_path / "no.links"
    rejected.mkdir()
    monkeypatch.setattr(alias, "_alias_parents", lambda: [str(rejected), str(tmp_path / "missing")])
    monkeypatch.delenv(dump_config.ENV_VAR, raising=False)
    dump_path = str(tmp_path / "v2.0" / "dump")
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ConfigError) as raised:
            PrecisionDebugger(task="statistics", level="L2", dump_path=dump_path)
    finally:
        ms.set_context(mode=mode)
    (problem,) = raised.value.problems
    assert (problem.path, problem.value) == ("dump_path", dump_path)
    assert alias.MINDSPORE_RULE in problem.allowed and "TMPDIR" in problem.allowed
    assert dump_config.ENV_VAR not in os.environ  # MindSpore was pointed at nothing
    assert not list(rejected.iterdir())
