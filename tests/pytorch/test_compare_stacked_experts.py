"""A fault confined to one slice of a stacked parameter (one expert of a Mixtral MoE layer, whose experts share
one [E, 2I, H] ``gate_up_proj``) is named at that expert's slice, bf16 against fp32; the clean pair names nothing
(docs/compare.md#slices-of-a-stacked-parameter)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_models import dump_one_step

from msprobe.pytorch.compare import compare

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
EXPERTS, FAULT = 8, 3


def _mixtral_run(root: Path, dtype: torch.dtype, fault: bool) -> tuple[Path, np.ndarray]:
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=EXPERTS, num_experts_per_tok=2, max_position_embeddings=64,
        attn_implementation="eager", experts_implementation="eager")  # eager: each expert's slice is an API call
    model = transformers.MixtralForCausalLM(config).to(dtype)
    stacked = model.model.layers[0].mlp.experts.gate_up_proj
    if fault:
        with torch.no_grad():
            stacked[FAULT].mul_(1.05)
    weights = stacked.detach().float().numpy().astype(np.float64)
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    out = dump_one_step(model, lambda m: m(input_ids=ids, labels=ids).loss, root, task="statistics", level="L1")
    return out / "dump.json", weights


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    root = tmp_path_factory.mktemp("moe")
    return {"fp32": _mixtral_run(root / "fp32", torch.float32, False),
            "bf16": _mixtral_run(root / "bf16", torch.bfloat16, False),
            "bf16_fault": _mixtral_run(root / "bf16_fault", torch.bfloat16, True)}


def _expert_slices(dump: Path) -> dict[int, dict]:
    """The getitem calls that take one expert out of the stacked gate_up_proj, by expert index."""
    slices = {}
    for name, entry in json.loads(dump.read_text())["data"].items():
        args = entry.get("input_args") or []
        if ".__getitem__." in name and name.endswith("forward") and isinstance(args[0], dict) \
                and args[0].get("shape") == [EXPERTS, 128, 32]:
            slices[int(args[1]["Max"])] = {"name": name, **entry}
    return slices


def test_the_faulted_expert_is_named_at_its_slice(runs, tmp_path):
    (fault_json, fault_weights), (ref_json, ref_weights) = runs["bf16_fault"], runs["fp32"]
    slices = _expert_slices(fault_json)
    assert FAULT in slices
    for dump, weights in ((fault_json, fault_weights), (ref_json, ref_weights)):  # the slice's own statistics
        recorded = _expert_slices(dump)[FAULT]["output"][0]
        assert recorded["Norm"] == pytest.approx(np.linalg.norm(weights[FAULT]), rel=1e-6)
        assert recorded["Mean"] == pytest.approx(weights[FAULT].mean(), rel=1e-5, abs=1e-9)
    # the whole parameter moves by a fraction of the slice's 5 %: within bf16 rounding
    whole = np.linalg.norm(fault_weights) / np.linalg.norm(ref_weights) - 1
    assert whole < 8 * 2.0 ** -8 < 0.05
    result = compare({"npu_json_path": str(fault_json), "bench_json_path": str(ref_json)}, tmp_path / "out")
    assert result.first_divergence is not None
    assert result.first_divergence.entry == slices[FAULT]["name"]


def test_the_clean_bf16_run_names_nothing(runs, tmp_path):
    result = compare({"npu_json_path": str(runs["bf16"][0]), "bench_json_path": str(runs["fp32"][0])},
                     tmp_path / "out")
    assert result.first_divergence is None
