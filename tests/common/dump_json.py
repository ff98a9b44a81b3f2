"""Reading a dump.json in tests: the tensor records of an entry, shared by both frameworks' tests; writing the
config.json that makes one; and loading the script that made a fixture of upstream msprobe (``tests/data``)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[1] / "data"


def fixture_maker(name: str) -> Any:
    """``tests/data/{name}/make_{name}.py`` as a module: the model and dump config an upstream fixture was made
    with (the scripts import msprobe only in their ``main()``, so loading one needs no upstream msprobe)."""
    spec = importlib.util.spec_from_file_location(f"make_{name}", DATA / name / f"make_{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tensor_records(value: Any) -> Iterator[dict]:
    """Every tensor record under a dump.json entry (arguments, outputs, nested lists and dicts), in order."""
    if isinstance(value, dict):
        if str(value.get("type", "")).endswith(".Tensor"):
            yield value
        else:
            for item in value.values():
                yield from tensor_records(item)
    elif isinstance(value, list):
        for item in value:
            yield from tensor_records(item)


def write_config(directory: Path, name: str, task: str, level: str, section: dict, **common) -> Path:
    """``directory/{name}.json``: a config.json dumping into ``directory/{name}`` with ``task``'s section."""
    config = directory / f"{name}.json"
    config.write_text(json.dumps({"task": task, "level": level, "dump_path": str(directory / name), task: section,
                                  **common}))
    return config


def step_data(dump_path: Path, step: int) -> dict:
    """The ``data`` of ``dump_path``'s dump.json of ``step`` (a run without a process group: ``rank``)."""
    return json.loads((dump_path / f"step{step}" / "rank" / "dump.json").read_text())["data"]


def parameters_grad_records(data: dict, kind: str, modules: Iterable[tuple[str, Any, dict]]) -> Iterator[tuple]:
    """Each ``(record, parameter)`` of step ``data``'s ``{kind}.{path}.{Class}.parameters_grad.0`` entries, after
    checking that exactly the named modules (cells) with trainable parameters of their own have one, with
    those parameters as members. ``modules``: (path, module, its own trainable parameters by name)."""
    expected = {f"{kind}.{path}.{type(module).__name__}.parameters_grad.0": own
                for path, module, own in modules if path and own}
    assert {name for name in data if ".parameters_grad." in name} == set(expected)
    for name, own in expected.items():
        assert set(data[name]) == set(own), name
        for member, param in own.items():
            (record,) = data[name][member]
            yield record, param
