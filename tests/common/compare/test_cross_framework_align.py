"""Cross-framework matching without frameworks: the built-in map, 1.1.1's four yaml files, and the aligner
on small MindSpore/PyTorch dump pairs written here (real files, read through the compare pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe.core.compare.align.framework_map import (
    builtin,
    torch_api_for,
    torch_class_for,
    torch_dtype_for,
    torch_suffix_for,
)
from msprobe.core.compare.pipeline import CompareOptions, build_results
from msprobe.core.compare.read.mapfiles import UserMaps, load_yaml, read_user_maps
from msprobe.core.compare.read.reader import CompareError, read_dump

# ---------------------------------------------------------------- the built-in map


@pytest.mark.parametrize(("ms", "pt"), [
    ("Mint.add", "Torch.add"), ("MintFunctional.relu", "Functional.relu"), ("Functional.dense", "Functional.linear"),
    ("Tensor.add", "Tensor.add"), ("Tensor.__add__", "Tensor.__add__"), ("Primitive.matmul.MatMul", "Torch.matmul"),
    ("Primitive.dense.Dense", "Functional.linear"), ("Functional.gather", "Torch.index_select"),
    ("Functional.relu", "Torch.relu"), ("Functional.gelu", "Functional.gelu"), ("Mint.softmax_ext", "Torch.softmax"),
    ("Mint.add.3.forward", "Torch.add"), ("Functional.bias_add", None), ("Functional.coo_abs", None),
    ("Primitive.shape.Shape", None), ("Jit.net.0.forward", None), ("Nonsense", None),
])
def test_torch_api_for(ms, pt):
    assert torch_api_for(ms) == pt


def test_classes_dtypes_and_argument_positions():
    assert torch_class_for("Dense") == "Linear" and torch_class_for("SequentialCell") == "Sequential"
    assert torch_class_for("Conv2d") == "Conv2d"  # same name: no entry needed
    assert torch_dtype_for("Float32") == "torch.float32" and torch_dtype_for("BFloat16") == "torch.bfloat16"
    # ops.gather(params, indices, axis) is index_select(input, dim, index)
    assert torch_suffix_for("Functional.gather", "input.1") == "input.2"
    assert torch_suffix_for("Functional.gather", "input.2") == "input.1"
    assert torch_suffix_for("Functional.gather.0.backward", "output.1", "backward") == "output.2"
    assert torch_suffix_for("Functional.conv2d", "input.4") is None  # pad_mode has no PyTorch partner
    assert torch_suffix_for("Functional.conv2d", "input.5") == "input.4"
    assert torch_suffix_for("Functional.softmax", "input.axis") == "input.dim"
    assert torch_suffix_for("Primitive.bn_infer.BatchNorm", "input.1") == "input.3"  # scale is weight
    fmap = builtin()
    assert fmap.positional("Functional.batch_norm", "input.weight") == "input.3"
    assert fmap.positional("Functional.batch_norm", "input.0") == "input.0"
    assert {fmap.op_kind(n) for n in ("Torch.add", "Tensor.__add__", "Tensor.add_", "Tensor.__radd__")} == {"add"}
    assert fmap.ms_op_kind("Functional.concat") == "cat" == fmap.op_kind("Torch.cat")


def test_every_target_is_a_pytorch_dump_name():
    fmap = builtin()
    targets = [t for t in (*fmap.apis.values(), *fmap.primitives.values()) if t is not None]
    assert targets and all(t.split(".", 1)[0] in ("Torch", "Functional", "Tensor", "Distributed") for t in targets)
    assert not fmap.ops_in_torch & fmap.ops_in_functional


# ---------------------------------------------------------------- 1.1.1's yaml files


YAMLS = {
    "am_documented": "ms_api: Functional.abs\npt_api: Torch.abs\nms_args:\n- 0\n- 2\npt_args:\n- 0\n- 1\n"
                     "ms_outputs:\n- 0\npt_outputs:\n- 0\n# a comment\n",
    "am_list": "- ms_api: Functional.abs   # inline comment\n  pt_api: Torch.abs\n  ms_args: [0, 2]\n  pt_args:\n"
               "    - 0\n    - 1\n  ms_output: [0]\n  pt_output: [0]\n- ms_api: Mint.x\n  pt_api: 'Torch.y'\n",
    "am_same_indent": "---\n- ms_api: A.b\n  ms_args:\n  - 0\n  - 1\n  pt_args:\n  - 1\n  - 0\n"
                      "-   ms_api: C.d\n    pt_api: E.f\n",
    "cm": "fc2.Dense: fc2.Linear\nCell.conv1.Conv2d: Module.conv3.Conv2d\n",
    "lm": "ParallelAttention:                 # Layer\n  qkv_proj: query_key_value\n  out_proj: dense\n"
          "Cell:\n  network_with_loss: module\nlayers:\n  '5': '0'\n  \"6\": '1'\n",
    "dm": "Functional.flash_attention_score.4.forward.input.0: NPU.npu_fusion_attention.4.forward.input.0\n"
          "Cell.relu.ReLU.forward.0.input.0: Module.x.forward.0.input.0\n",
}


@pytest.mark.parametrize("name", list(YAMLS))
def test_yaml_subset_reads_like_pyyaml(tmp_path, name):
    yaml = pytest.importorskip("yaml")  # the reference: a full YAML parser (test-only)
    path = tmp_path / f"{name}.yaml"
    path.write_text(YAMLS[name])
    assert load_yaml(path, name) == yaml.safe_load(YAMLS[name])


def write(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(YAMLS[name])
    return str(path)


def test_api_mapping_documented_and_accepted_spellings(tmp_path):
    for name in ("am_documented", "am_list"):
        maps = read_user_maps(write(tmp_path, name), None, None)
        assert maps.requested and maps.apis["Functional.abs"] == "Torch.abs"
        assert maps.arguments["Functional.abs"] == {"input.0": "input.0", "input.2": "input.1"}
        assert maps.outputs["Functional.abs"] == {"output.0": "output.0"}
    assert read_user_maps(write(tmp_path, "am_list"), None, None).apis["Mint.x"] == "Torch.y"
    assert read_user_maps(True, None, None) == UserMaps(requested=True)


@pytest.mark.parametrize(("text", "message"), [
    ("ms_api: A.b\npt_api: C.d\nms_args: [0, 1]\npt_args: [0]\n", "same number of positions"),
    ("ms_api: A.b\npt_api: C.d\nms_argz: [0]\n", "unknown key 'ms_argz'"),
    ("ms_api: A.b\n", "needs 'ms_api' and 'pt_api'"),
    ("ms_api: A.b\npt_api: C.d\nms_args: [0, 0]\npt_args: [0, 1]\n", "repeats a position"),
    ("ms_api: {a: 1}\n", "does not support"),
    ("a:\n\tb: c\n", "tab"),
])
def test_bad_api_mapping_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CompareError, match=message) as caught:
        read_user_maps(str(path), None, None)
    assert "bad.yaml" in str(caught.value)


def test_cell_and_layer_mapping(tmp_path):
    maps = read_user_maps(None, write(tmp_path, "cm"), write(tmp_path, "lm"))
    assert maps.cells == {"fc2.Dense": "fc2.Linear", "conv1.Conv2d": "conv3.Conv2d"}
    assert maps.layers["TopLayer"] == {"network_with_loss": "module"}  # 1.1.1's older spelling "Cell"
    assert maps.layers["layers"] == {"5": "0", "6": "1"}
    with pytest.raises(CompareError, match="cell mapping file"):
        read_user_maps(None, str(tmp_path / "missing.yaml"), None)


# ---------------------------------------------------------------- the aligner on dump pairs


def tensor(framework: str, shape, dtype="float32", mean=0.5):
    if framework == "mindspore":
        kind, name = "mindspore.Tensor", {"float32": "Float32", "bfloat16": "BFloat16"}[dtype]
    else:
        kind, name = "torch.Tensor", f"torch.{dtype}"
    return {"type": kind, "dtype": name, "shape": list(shape), "Max": 1.0, "Min": 0.0, "Mean": mean, "Norm": 2.0}


def call(framework, inputs, outputs, **kwargs):
    return {"input_args": [tensor(framework, s) if isinstance(s, tuple) else s for s in inputs],
            "input_kwargs": kwargs, "output": [tensor(framework, s) for s in outputs]}


def dump(root: Path, framework: str, entries: dict, parents: dict | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "dump_data_dir": None,
                                                "data": entries}))
    if parents is not None:
        (root / "construct.json").write_text(json.dumps(parents))
    return root / "dump.json"


def pairs_of(npu: Path, bench: Path, **options) -> list[tuple[str | None, str | None]]:
    results = build_results(read_dump(npu), read_dump(bench), CompareOptions(**options))
    return [(r.npu.name if r.npu else None, r.bench.name if r.bench else None) for r in results]


def test_no_pair_on_a_bare_name_coincidence(tmp_path):
    """ops.relu inside cell ``a`` is PyTorch's torch.relu inside module ``a``, not the same-named
    ``Functional.relu`` PyTorch called elsewhere (1.1.1 joined on the name: a false alarm)."""
    ms = dump(tmp_path / "ms", "mindspore", {
        "Functional.relu.0.forward": call("mindspore", [(2, 3)], [(2, 3)]),
        "Cell.a.ReLU.forward.0": call("mindspore", [(2, 3)], [(2, 3)]),
        "Mint.abs.0.forward": call("mindspore", [(4,)], [(4,)]),
    }, {"Functional.relu.0.forward": "Cell.a.ReLU.forward.0", "Cell.a.ReLU.forward.0": None,
        "Mint.abs.0.forward": None})
    pt = dump(tmp_path / "pt", "pytorch", {
        "Torch.relu.0.forward": call("pytorch", [(2, 3)], [(2, 3)]),
        "Module.a.ReLU.forward.0": call("pytorch", [(2, 3)], [(2, 3)]),
        "Functional.relu.0.forward": call("pytorch", [(4,)], [(4,)]),
        "Torch.abs.0.forward": call("pytorch", [(4,)], [(4,)]),
    }, {"Torch.relu.0.forward": "Module.a.ReLU.forward.0", "Module.a.ReLU.forward.0": None,
        "Functional.relu.0.forward": None, "Torch.abs.0.forward": None})
    pairs = pairs_of(ms, pt)
    assert ("Functional.relu.0.forward.output.0", "Torch.relu.0.forward.output.0") in pairs
    assert ("Cell.a.ReLU.forward.0.output.0", "Module.a.ReLU.forward.0.output.0") in pairs
    assert ("Mint.abs.0.forward.input.0", "Torch.abs.0.forward.input.0") in pairs
    assert (None, "Functional.relu.0.forward.output.0") in pairs
    assert len(pairs) == 8  # every row of both sides, once: 6 pairs and PyTorch's Functional.relu


def test_bf16_port_against_fp32_and_either_direction(tmp_path):
    ms_entry = call("mindspore", [], [])
    ms_entry["input_args"] = [tensor("mindspore", (2, 2), "bfloat16")]
    ms_entry["output"] = [tensor("mindspore", (2, 2), "bfloat16")]
    ms = dump(tmp_path / "ms", "mindspore", {"Mint.exp.0.forward": ms_entry})
    pt = dump(tmp_path / "pt", "pytorch", {"Tensor.exp.0.forward": call("pytorch", [(2, 2)], [(2, 2)])})
    expected = [("Mint.exp.0.forward.input.0", "Tensor.exp.0.forward.input.0"),
                ("Mint.exp.0.forward.output.0", "Tensor.exp.0.forward.output.0")]
    assert pairs_of(ms, pt) == expected
    assert pairs_of(pt, ms) == [(b, a) for a, b in expected]  # PyTorch as the NPU side works too


def test_argument_positions_and_keywords(tmp_path):
    ms = dump(tmp_path / "ms", "mindspore", {
        "Functional.gather.0.forward": call("mindspore", [(5, 3), (2,), {"type": "int", "value": 0}], [(2, 3)])})
    pt = dump(tmp_path / "pt", "pytorch", {
        "Torch.index_select.0.forward": call("pytorch", [(5, 3)], [(2, 3)], dim={"type": "int", "value": 0},
                                             index=tensor("pytorch", (2,)))})
    pairs = pairs_of(ms, pt)
    assert ("Functional.gather.0.forward.input.1", "Torch.index_select.0.forward.input.index") in pairs
    assert ("Functional.gather.0.forward.input.2", "Torch.index_select.0.forward.input.dim") in pairs
    assert len(pairs) == 4


def test_user_maps_add_pairs_and_never_remove_rows(tmp_path):
    """``-am`` pairs an API the built-in map does not know, with its argument order; ``-dm`` pairs two
    entries by name; ``-lm`` renames layers. Each only adds pairs: the report keeps every row."""
    ms = dump(tmp_path / "ms", "mindspore", {
        "Functional.my_op.0.forward": call("mindspore", [(2,), (3,)], [(2,)]),
        "Functional.bias_add.0.forward": call("mindspore", [(4,), (4,)], [(4,)]),
        "Mint.abs.0.forward": call("mindspore", [(6,)], [(6,)]),
        "Cell.attention.qkv_proj.Dense.forward.0": call("mindspore", [(7,)], [(7,)]),
        "Cell.attention.ParallelAttention.forward.0": call("mindspore", [(7,)], [(7,)]),
        "Cell.layers.5.Dense.forward.0": call("mindspore", [(8,)], [(8,)]),
    }, {})
    pt = dump(tmp_path / "pt", "pytorch", {
        "Torch.their_op.0.forward": call("pytorch", [(3,), (2,)], [(2,)]),
        "Torch.add.0.forward": call("pytorch", [(4,), (4,)], [(4,)]),
        "Torch.abs.0.forward": call("pytorch", [(6,)], [(6,)]),
        "Module.self_attention.query_key_value.Linear.forward.0": call("pytorch", [(7,)], [(7,)]),
        "Module.self_attention.ParallelAttention.forward.0": call("pytorch", [(7,)], [(7,)]),
        "Module.layers.0.Linear.forward.0": call("pytorch", [(8,)], [(8,)]),
    }, {})
    plain = pairs_of(ms, pt)
    assert len(plain) == 26 and ("Mint.abs.0.forward.output.0", "Torch.abs.0.forward.output.0") in plain
    am = tmp_path / "am.yaml"
    am.write_text("ms_api: Functional.my_op\npt_api: Torch.their_op\nms_args: [0, 1]\npt_args: [1, 0]\n")
    lm = tmp_path / "lm.yaml"
    lm.write_text("TopLayer:\n  attention: self_attention\nParallelAttention:\n  qkv_proj: query_key_value\n"
                  "layers:\n  '5': '0'\n")  # a layer class's attributes; the items of the attribute 'layers'
    maps = read_user_maps(str(am), None, str(lm))
    mapped = pairs_of(ms, pt, maps=maps, mapping={"Functional.bias_add.0.forward": "Torch.add.0.forward"})
    assert ("Functional.my_op.0.forward.input.0", "Torch.their_op.0.forward.input.1") in mapped
    assert ("Functional.my_op.0.forward.input.1", "Torch.their_op.0.forward.input.0") in mapped
    assert ("Functional.bias_add.0.forward.input.1", "Torch.add.0.forward.input.1") in mapped
    assert ("Cell.attention.qkv_proj.Dense.forward.0.output.0",
            "Module.self_attention.query_key_value.Linear.forward.0.output.0") in mapped
    assert ("Cell.layers.5.Dense.forward.0.output.0", "Module.layers.0.Linear.forward.0.output.0") in mapped
    assert len(mapped) == 14  # 14 rows on each side, all paired; nothing dropped
    names = {n for pair in mapped for n in pair if n}
    assert names == {n for pair in plain for n in pair if n}


def test_cross_framework_options_need_a_cross_framework_pair(tmp_path):
    a = dump(tmp_path / "a", "pytorch", {"Torch.abs.0.forward": call("pytorch", [(6,)], [(6,)])})
    b = dump(tmp_path / "b", "pytorch", {"Torch.abs.0.forward": call("pytorch", [(6,)], [(6,)])})
    with pytest.raises(CompareError, match="npu_path .* is pytorch and bench_path .* is pytorch"):
        pairs_of(a, b, maps=UserMaps(requested=True))
    assert read_dump(a).framework == "pytorch"


def test_recorded_framework_field(tmp_path):
    path = dump(tmp_path / "x", "pytorch", {"Functional.abs.0.forward": {"input_args": [], "output": []}})
    assert read_dump(path).framework is None  # nothing in it says which framework wrote it
    obj = json.loads(path.read_text())
    path.write_text(json.dumps({**obj, "framework": "mindspore"}))
    assert read_dump(path).framework == "mindspore"
    path.write_text(json.dumps({**obj, "framework": "tensorflow"}))
    with pytest.raises(CompareError, match="'framework' is 'tensorflow'; allowed: pytorch, mindspore"):
        read_dump(path)


def test_dtype_arguments_of_either_spelling_are_equal(tmp_path):
    """``x.astype(ms.float32)`` against ``x.to(torch.float32)``: the dtype argument is one value, not a
    difference (which would also be named as a divergence)."""
    ms = dump(tmp_path / "ms", "mindspore", {
        "Tensor.astype.0.forward": call("mindspore", [(3,), {"type": "mindspore.dtype", "value": "Float32"}], [(3,)])})
    pt = dump(tmp_path / "pt", "pytorch", {
        "Tensor.to.0.forward": call("pytorch", [(3,), {"type": "torch.dtype", "value": "torch.float32"}], [(3,)])})
    from msprobe.core.compare.pipeline import _judge_cheap

    results = build_results(read_dump(ms), read_dump(pt), CompareOptions())
    _judge_cheap(results)
    dtype_row = next(r for r in results if r.npu and r.npu.suffix == "input.1")
    assert dtype_row.bench.suffix == "input.1" and dtype_row.verdict == ""  # summary mode: no warning


@pytest.mark.frameworks("mindspore")
def test_command_line_refuses_bad_mapping_files_before_work(tmp_path, msprobe_log):
    from msprobe.core import cli

    ms = dump(tmp_path / "ms", "mindspore", {"Mint.abs.0.forward": call("mindspore", [(6,)], [(6,)])})
    pt = dump(tmp_path / "pt", "pytorch", {"Torch.abs.0.forward": call("pytorch", [(6,)], [(6,)])})
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(ms), "bench_path": str(pt)}))
    bad = tmp_path / "am.yaml"
    bad.write_text("ms_api: Mint.abs\npt_api: Torch.abs\nms_args: [0, 1]\npt_args: [0]\n")
    base = ["-f", "mindspore", "compare", "-i", str(config), "-o", str(tmp_path / "out")]
    assert cli.main([*base, "-am", str(bad)]) == 2
    assert "am.yaml" in msprobe_log.text() and "same number of positions" in msprobe_log.text()
    assert not (tmp_path / "out").exists()
    assert cli.main([*base, "-am", "-cm", "-lm"]) == 0  # 1.1.1's switches without files
    config.write_text(json.dumps({"npu_path": str(pt), "bench_path": str(pt)}))
    assert cli.main([*base, "-cm"]) == 2 and "is pytorch and bench_path" in msprobe_log.text()


def test_rows_proven_different_stay_unpaired_with_the_reason(tmp_path):
    """A shape that differs, or float32 value ranges that do not overlap, prove two rows are not one tensor:
    both stay in the report, unpaired, each saying why; overlapping ranges pair (a difference to report)."""
    far = {**tensor("pytorch", (3,)), "Max": 9.0, "Min": 8.0}
    ms = dump(tmp_path / "ms", "mindspore", {
        "Mint.add.0.forward": call("mindspore", [(3,), (3,)], [(3,)])})
    pt = dump(tmp_path / "pt", "pytorch", {
        "Torch.add.0.forward": {"input_args": [tensor("pytorch", (3,)), far], "input_kwargs": {},
                                "output": [tensor("pytorch", (3,), mean=0.9)]}})
    results = build_results(read_dump(ms), read_dump(pt), CompareOptions())
    pairs = [(r.npu.name if r.npu else None, r.bench.name if r.bench else None) for r in results]
    assert ("Mint.add.0.forward.output.0", "Torch.add.0.forward.output.0") in pairs
    assert ("Mint.add.0.forward.input.1", None) in pairs and (None, "Torch.add.0.forward.input.1") in pairs
    reasons = [m for r in results for m in r.messages if "do not overlap" in m]
    assert len(reasons) == 2
    from msprobe.core.compare.align.entries import not_the_same
    from msprobe.core.compare.read.rows import Row

    def row(framework, shape):
        return Row("E", "input.0", "input", tensor(framework, shape))

    assert "shapes [2, 3] and [3, 2] differ" in not_the_same(row("mindspore", (2, 3)), row("pytorch", (3, 2)))
    assert not_the_same(row("mindspore", ()), row("pytorch", (1,))) is None
