"""Custom APIs (docs/pytorch/dump.md#custom-apis): operators of a ``torch.library`` namespace named by
``custom_op_namespaces`` and a Python function given to ``register_custom_api`` are named, counted, filtered,
compared and replayed (run_ut: "no bench") like built-in APIs, on a LLaMA built by transformers whose MLP calls
both; the training's numbers stay bit for bit those of a run without msprobe."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import step_data, write_config
from zoo import ZOO, train

from msprobe.core import cli
from msprobe.core.compare.api import run_compare
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.tensor_files import load_pt

LLAMA = next(spec for spec in ZOO if spec.name == "llama")
NAMESPACE = "msprobe_custom_test"

_library = torch.library.Library(NAMESPACE, "DEF")
_library.define("scaled_silu(Tensor x, float a) -> Tensor")
_library.impl("scaled_silu", lambda x, a: torch.nn.functional.silu(x) * a, "CompositeImplicitAutograd")

# a third-party library's Python function, as an importable module
fusedlib = types.ModuleType("fusedlib")


def _gated(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


fusedlib.gated = _gated
sys.modules["fusedlib"] = fusedlib


@pytest.fixture(autouse=True)
def custom_mlp(monkeypatch):
    """Each LLaMA MLP computes ``down(scaled_silu(fusedlib.gated(gate(x), up(x)), 1))``, ``fusedlib.gated``
    looked up at call time."""
    from transformers.models.llama.modeling_llama import LlamaMLP

    def forward(self, x):
        gated = fusedlib.gated(self.gate_proj(x), self.up_proj(x))
        return self.down_proj(torch.ops.msprobe_custom_test.scaled_silu(gated, 1.0))

    monkeypatch.setattr(LlamaMLP, "forward", forward)
    yield
    if any(api.owner is fusedlib for api in CUSTOM_APIS.apis()):
        PrecisionDebugger.restore_custom_api(fusedlib, "gated")


def _debugger(tmp_path: Path, name: str, task: str = "statistics", common: dict | None = None,
              **section) -> PrecisionDebugger:
    config = write_config(tmp_path, name, task, "mix", section, custom_op_namespaces=[NAMESPACE], **(common or {}))
    debugger = PrecisionDebugger(config_path=str(config))
    PrecisionDebugger.register_custom_api(fusedlib, "gated", "FusedLib")
    return debugger


def test_custom_apis_are_named_counted_and_training_is_unchanged(tmp_path):
    reference = train(LLAMA)
    observed = train(LLAMA, _debugger(tmp_path, "all"))
    assert all(torch.equal(a, b) for run_a, run_b in zip(reference, observed) for a, b in zip(run_a, run_b)
               if a is not None)
    assert fusedlib.gated is _gated  # taken off again when collection stopped
    data = step_data(tmp_path / "all", 0)
    layers = LLAMA.build().config.num_hidden_layers
    for kind in ("FusedLib.gated", f"{NAMESPACE}.scaled_silu"):
        assert [f"{kind}.{n}.forward" for n in range(layers)] == [n for n in data if n.startswith(f"{kind}.")
                                                                  and n.endswith("forward")]
        assert f"{kind}.0.backward" in data
    assert not any(".silu." in name for name in data)  # the insides of a custom API are not separate APIs


def test_list_filter_keeps_a_custom_api_and_its_statistics_are_right(tmp_path):
    debugger = _debugger(tmp_path, "tensors", "tensor", list=["FusedLib.gated"])
    train(LLAMA, debugger, steps=1)
    data = step_data(tmp_path / "tensors", 0)
    assert {name.rsplit(".", 2)[0] for name in data} == {"FusedLib.gated"}
    entry = data["FusedLib.gated.0.forward"]
    folder = tmp_path / "tensors" / "step0" / "rank" / "dump_tensor_data"
    gate, up = (torch.load(folder / v["data_name"]).double().numpy() for v in entry["input_args"])
    expected = gate / (1 + np.exp(-gate)) * up  # float64 numpy reference of silu(gate) * up
    output = entry["output"][0]
    for key, reduce in (("Max", np.max), ("Min", np.min), ("Mean", np.mean)):
        assert output[key] == pytest.approx(float(reduce(expected)), rel=1e-5, abs=1e-6)
    assert np.allclose(torch.load(folder / output["data_name"]).double().numpy(), expected, rtol=1e-5, atol=1e-6)

    assert cli.main(["-f", "pytorch", "run_ut", "-api_info", str(tmp_path / "tensors" / "step0" / "rank" /
                                                                   "dump.json"), "-o", str(tmp_path / "ut")]) == 1
    result = next((tmp_path / "ut").glob("accuracy_checking_result_*.csv"))
    with open(result, encoding="utf-8-sig", newline="") as handle:
        rows = {row["API name"]: row for row in csv.DictReader(handle)}
    assert rows["FusedLib.gated.0"]["Forward Test Success"] == "SKIP"
    assert rows["FusedLib.gated.0"]["Message"].startswith("no bench: FusedLib.gated is a custom API")


def test_risk_level_core_keeps_custom_apis(tmp_path):
    train(LLAMA, _debugger(tmp_path, "core", common={"risk_level": "CORE"}), steps=1)
    kinds = {name.rsplit(".", 2)[0] for name in step_data(tmp_path / "core", 0) if not name.startswith("Module.")}
    assert {"FusedLib.gated", f"{NAMESPACE}.scaled_silu", "Functional.linear"} <= kinds  # asked for by name
    assert "Tensor.view" not in kinds and "Torch.cat" not in kinds


def test_two_dumps_of_custom_apis_compare_row_by_row(tmp_path):
    for name in ("a", "b"):
        train(LLAMA, _debugger(tmp_path, name), steps=1)
    paths = {"npu_path": tmp_path / "a" / "step0" / "rank" / "dump.json", "stack_path": None,
             "bench_path": tmp_path / "b" / "step0" / "rank" / "dump.json"}
    report = run_compare(load_pt, paths, tmp_path / "compare", CompareOptions(workers=1, progress=False))
    rows = {r.npu.name: r for r in report.results if r.npu is not None}
    for kind in ("FusedLib.gated", f"{NAMESPACE}.scaled_silu"):
        for row in (f"{kind}.0.forward.output.0", f"{kind}.1.forward.input.0", f"{kind}.0.backward.input.0"):
            assert rows[row].bench is not None and rows[row].bench.name == row  # paired by name, like built-ins
            assert rows[row].stat_diffs and all(d in (0.0, None) for pair in rows[row].stat_diffs for d in pair)


@pytest.mark.parametrize(("args", "expected"), [
    ((fusedlib, "missing", "X"), "has no callable attribute 'missing'"),
    ((fusedlib, "gated", "Module"), "taken by module entries"),
    ((fusedlib, "gated", "a..b"), "empty dot-separated parts"),
])
def test_bad_registrations_are_one_line_errors(args, expected):
    with pytest.raises(ValueError, match=expected):
        PrecisionDebugger.register_custom_api(*args)


def test_bad_namespace_is_a_config_error(tmp_path):
    from msprobe.core.config import ConfigError

    config = write_config(tmp_path, "ns", "statistics", "L1", {}, custom_op_namespaces=["torch.ops.x"])
    with pytest.raises(ConfigError, match=r"custom_op_namespaces\[0\]"):
        PrecisionDebugger(config_path=str(config))


def test_the_documented_example_runs(tmp_path):
    doc = Path(__file__).resolve().parents[2] / "docs" / "pytorch" / "dump.md"
    code = next(block for block in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
                if "register_custom_api" in block)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    printed = code.rsplit("print(", 1)[1].split("\n", 1)[1].replace("# ", "").replace("\n", "")
    assert result.stdout.strip() == printed.strip()
