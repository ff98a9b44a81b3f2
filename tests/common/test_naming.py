"""Entry-name grammar: building, parsing from the right, counters, tensor file names."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path

import pytest

from msprobe.core.lifecycle import naming
from msprobe.core.lifecycle.naming import (
    BACKWARD,
    FORWARD,
    CallCounter,
    EntryName,
    api_name,
    backward_name,
    module_name,
    parse_name,
    safe_module_parts,
    tensor_file_name,
)

REFERENCE = str(Path(__file__).resolve().parents[1] / "data" / "reference-outputs")

API_CASES = [
    # full name, prefix, api, count, direction
    ("Torch.add.0.forward", "Torch", "add", 0, FORWARD),
    ("Torch.linalg.norm.0.forward", "Torch", "linalg.norm", 0, FORWARD),
    ("Tensor.__add__.12.backward", "Tensor", "__add__", 12, BACKWARD),
    ("Distributed.all_reduce.3.forward", "Distributed", "all_reduce", 3, FORWARD),
    ("Primitive.matmul.MatMul.0.forward", "Primitive", "matmul.MatMul", 0, FORWARD),
    ("Jit.Net.construct.1.forward", "Jit", "Net.construct", 1, FORWARD),
    ("MintFunctional.relu.0.backward", "MintFunctional", "relu", 0, BACKWARD),
]

MODULE_CASES = [
    # full name, kind, path, class, direction, count
    ("Module.conv1.Conv2d.forward.0", "Module", "conv1", "Conv2d", FORWARD, 0),
    ("Module.layers.0.attn.Attention.forward.3", "Module", "layers.0.attn", "Attention", FORWARD, 3),
    ("Cell.network_with_loss.fc.Dense.backward.1", "Cell", "network_with_loss.fc", "Dense", BACKWARD, 1),
    ("Module.module.module.Linear.backward.10", "Module", "module.module", "Linear", BACKWARD, 10),
]


@pytest.mark.parametrize(("full", "prefix", "api", "count", "direction"), API_CASES)
def test_api_names_build_and_parse_back(full, prefix, api, count, direction):
    assert api_name(prefix, api, count, direction) == full
    parsed = parse_name(full)
    assert parsed == EntryName("api", prefix, api, None, count, direction)
    assert parsed.full == full and not parsed.is_module


@pytest.mark.parametrize(("full", "kind", "path", "cls", "direction", "count"), MODULE_CASES)
def test_module_names_build_and_parse_back(full, kind, path, cls, direction, count):
    assert module_name(kind, path, cls, direction, count) == full
    parsed = parse_name(full)
    assert parsed == EntryName("module", kind, path, cls, count, direction)
    assert parsed.full == full and parsed.is_module


def test_twin_swaps_only_the_direction():
    assert parse_name("Torch.linalg.norm.2.forward").twin(BACKWARD) == "Torch.linalg.norm.2.backward"
    assert parse_name("Cell.fc.Dense.backward.4").twin(FORWARD) == "Cell.fc.Dense.forward.4"
    assert (
        backward_name("Module.layers.0.attn.Attention.forward.3")
        == "Module.layers.0.attn.Attention.backward.3"
    )
    assert backward_name("Primitive.matmul.MatMul.0.forward") == "Primitive.matmul.MatMul.0.backward"


def test_every_name_in_the_reference_dumps_round_trips():
    names = set()
    for path in glob.glob(f"{REFERENCE}/*/*/step*/rank*/construct.json"):
        with open(path) as handle:
            construct = json.load(handle)
        names |= set(construct) | {parent for parent in construct.values() if parent}
    for path in glob.glob(f"{REFERENCE}/*/*/step*/rank*/dump.json"):
        with open(path) as handle:
            names |= set(json.load(handle)["data"])
    assert len(names) > 30
    for name in names:
        assert parse_name(name).full == name


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "relu",
        "Torch.add",
        "Torch.add.forward",
        "Torch.add.0",
        "Torch.add.x.forward",
        "Torch..0.forward",
        "Torch.add.0.sideways",
        "Module.Linear.forward.0",  # no path: the root module is not named
        "Layer.fc.Linear.forward.0",  # module shape, unknown kind
        ".add.0.forward",
    ],
)
def test_bad_names_raise_naming_the_name(bad):
    with pytest.raises(ValueError) as error:
        parse_name(bad)
    assert repr(bad) in str(error.value)


def test_builders_reject_bad_parts():
    with pytest.raises(ValueError, match="direction 'up'"):
        api_name("Torch", "add", 0, "up")
    with pytest.raises(ValueError, match="count -1"):
        api_name("Torch", "add", -1, FORWARD)
    with pytest.raises(ValueError, match="prefix 'Torch.x'"):
        api_name("Torch.x", "add", 0, FORWARD)
    with pytest.raises(ValueError, match="module kind 'Layer'"):
        module_name("Layer", "fc", "Linear", FORWARD, 0)
    with pytest.raises(ValueError, match="module class 'nn.Linear'"):
        module_name("Module", "fc", "nn.Linear", FORWARD, 0)
    with pytest.raises(ValueError, match="module path ''"):
        module_name("Module", "", "Linear", FORWARD, 0)
    with pytest.raises(ValueError, match="not a forward name"):
        backward_name("Torch.add.0.backward")


def test_call_counter_counts_per_key_from_zero_and_resets():
    counter = CallCounter()
    assert [counter.next("Torch.add") for _ in range(3)] == [0, 1, 2]
    assert counter.next("Tensor.add") == 0
    assert counter.next("Torch.add") == 3
    counter.reset()
    assert counter.next("Torch.add") == 0
    assert counter.next("Tensor.add") == 0


def test_tensor_file_names_follow_the_1_1_1_pattern():
    assert (
        tensor_file_name("Torch.cat.0.forward", "input", (0, 1), ".pt") == "Torch.cat.0.forward.input.0.1.pt"
    )
    assert (
        tensor_file_name("Functional.linear.0.forward", "kwargs", ("weight",), ".pt")
        == "Functional.linear.0.forward.kwargs.weight.pt"
    )
    assert (
        tensor_file_name("Mint.abs.0.backward", "output", (0,), ".npy") == "Mint.abs.0.backward.output.0.npy"
    )
    reference = os.listdir(f"{REFERENCE}/pytorch/pt_tensor_L1_fp32/step0/rank/dump_tensor_data")
    assert "Functional.conv2d.0.backward.output.2.pt" in reference
    assert tensor_file_name("Functional.conv2d.0.backward", "output", (2,), ".pt") in reference


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a/b", "E.0.forward.kwargs.a_b.pt"),
        ("../../etc/passwd", "E.0.forward.kwargs__.__._etc_passwd.pt"),
        ("x\x00y\nz", "E.0.forward.kwargs.x_y_z.pt"),
        ("a\\b", "E.0.forward.kwargs.a_b.pt"),
        ("end.", "E.0.forward.kwargs.end_.pt"),
    ],
)
def test_tensor_file_names_are_one_safe_component(key, expected):
    name = tensor_file_name("E.0.forward", "kwargs", (key,), ".pt")
    assert name == expected
    assert "/" not in name and "\\" not in name and ".." not in name
    assert all(ord(c) >= 32 for c in name)


def test_long_tensor_file_names_are_shortened_stably_keeping_the_suffix(tmp_path):
    entry = "Module." + ".".join(f"block{i}" for i in range(60)) + ".Linear.forward.0"
    name = tensor_file_name(entry, "input", (0, 1), ".pt")
    again = tensor_file_name(entry, "input", (0, 1), ".pt")
    other = tensor_file_name(entry, "input", (0, 2), ".pt")
    assert name == again and name != other
    assert len(name.encode("utf-8")) <= 255 and name.endswith(".pt")
    assert name.startswith("Module.block0.block1.")
    digest = hashlib.sha256(f"{entry}.input.0.1.pt".encode()).hexdigest()[:16]
    assert name.endswith(f".{digest}.pt")
    (tmp_path / name).write_bytes(b"x")  # the file system accepts it
    multibyte = tensor_file_name("Torch.add.0.forward", "kwargs", ("é" * 200,), ".npy")
    assert len(multibyte.encode("utf-8")) <= 255 and multibyte.endswith(".npy")
    multibyte.encode("utf-8")  # never cut inside a character


def test_tensor_file_name_rejects_bad_part_and_suffix():
    with pytest.raises(ValueError, match="tensor part 'grad'"):
        tensor_file_name("Torch.add.0.forward", "grad", (0,), ".pt")
    with pytest.raises(ValueError, match="suffix '/x.pt'"):
        tensor_file_name("Torch.add.0.forward", "input", (0,), "/x.pt")


@pytest.mark.parametrize(
    ("path", "cls", "expected"),
    [
        ("layers.0.attn", "Attention", ("layers.0.attn", "Attention")),  # nothing to repair
        ("..", "Linear", ("_._._", "Linear")),
        ("a..b", "Linear", ("a._.b", "Linear")),
        ("", "Linear", ("_", "Linear")),
        ("enc.a/b", "Tanh", ("enc.a_b", "Tanh")),
        ("x\\y", "ReLU", ("x_y", "ReLU")),
        ("x\ny.\x00", "ReLU", ("x_y._", "ReLU")),
        ("fc", "my.Linear", ("fc", "my_Linear")),
        ("fc", "", ("fc", "_")),
    ],
)
def test_safe_module_parts_repairs_what_cannot_be_named(path, cls, expected, msprobe_log):
    naming._safe_module_parts.cache_clear()  # each repair is logged once per process: forget earlier ones
    assert safe_module_parts(path, cls) == expected
    name = module_name("Module", *expected, FORWARD, 0)  # the builder accepts the result
    entry = parse_name(name)
    assert (entry.api, entry.cls) == expected and entry.full == name
    assert (expected != (path, cls)) == (repr(path) in msprobe_log.text())  # a repair is logged
    assert "/" not in tensor_file_name(name, "input", (0,), ".pt")
