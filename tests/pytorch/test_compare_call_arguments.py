"""Two runs that call the same API with different non-tensor arguments (GPT-2's LayerNorm epsilon): the call
itself is where they part, so the first divergence says which argument differs and replay attribution books
it ``local`` (docs/compare.md#an-api-called-with-different-arguments)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_models import dump_one_step

from msprobe.core import cli
from msprobe.core.compare.judge.attribution import LOCAL
from msprobe.core.compare.read import read_plain_pt
from msprobe.pytorch.compare import compare

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
EPS = {"npu": 0.5, "bench": 1e-05}


def _gpt2_run(root: Path, eps: float) -> Path:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, attn_implementation="eager", layer_norm_epsilon=eps))
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    return dump_one_step(model, lambda m: m(input_ids=ids, labels=ids).loss, root, task="tensor", level="L1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eps")
    return {side: _gpt2_run(root / side, eps) for side, eps in EPS.items()}


def _layer_norm64(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def test_each_side_is_its_own_epsilon_s_layer_norm_in_float64(runs):
    """The two layer norms differ by their epsilon alone: each output is float64 numpy's with its own eps."""
    for side, run in runs.items():
        entry = json.loads((run / "dump.json").read_text())["data"]["Functional.layer_norm.0.forward"]
        kwargs = entry["input_kwargs"]
        x, weight, bias, out = (read_plain_pt(run / "dump_tensor_data" / value["data_name"]).astype(np.float64)
                                for value in (entry["input_args"][0], kwargs["weight"], kwargs["bias"],
                                              entry["output"][0]))
        assert kwargs["eps"] == {"type": "float", "value": EPS[side]}
        np.testing.assert_allclose(out, _layer_norm64(x, weight, bias, EPS[side]), rtol=1e-5, atol=1e-6)


def test_the_call_with_another_epsilon_is_the_local_origin(runs, tmp_path, msprobe_log):
    result = compare({"npu_json_path": str(runs["npu"] / "dump.json"),
                      "bench_json_path": str(runs["bench"] / "dump.json")}, tmp_path / "out", workers=1, attribute=3)
    found = result.first_divergence
    assert found.entry == "Functional.layer_norm.0.forward"
    assert found.arguments == ["eps 0.5 vs 1e-05"]
    local = result.attribution.first_local
    assert local is not None and local.entry == found.entry and local.verdict == LOCAL
    assert "its own arguments: eps 0.5 vs 1e-05" in local.label
    assert "eps 0.5 vs 1e-05" in msprobe_log.text()
    page = next((tmp_path / "out").glob("*.html")).read_text()
    assert "eps 0.5 vs 1e-05" in page
    csv_text = next((tmp_path / "out").glob("*.csv")).read_text()
    assert "its own arguments: eps 0.5 vs 1e-05" in csv_text


def test_the_graph_node_says_which_argument_differs(runs, tmp_path):
    config = tmp_path / "graph.json"
    config.write_text(json.dumps({"npu_path": str(runs["npu"]), "bench_path": str(runs["bench"])}))
    assert cli.main(["-f", "pytorch", "graph", "-i", str(config), "-o", str(tmp_path / "graph")]) == 0
    nodes = json.loads(next((tmp_path / "graph").glob("*.vis")).read_text())["NPU"]["node"]
    assert nodes["Functional.layer_norm.0.forward"]["data"]["arguments_differ"] == "eps 0.5 vs 1e-05"
