"""Reading a dump.json in tests: the tensor records of an entry, shared by both frameworks' tests; writing the
config.json that makes one; and loading the script that made a fixture of upstream msprobe (``tests/data``)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

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


def load_config(directory: Path, name: str, load: dict, task: str = "statistics") -> str:
    """``directory/{name}.json``: an L0 config.json of ``task`` with the ``load`` key (module input replay)."""
    return str(write_config(directory, name, task, "L0", {}, load=load))


def assert_dumped_the_loaded_input(source: Path, dump_path: Path, name: str, read_array: Any) -> None:
    """With ``dump_after_load``, the dump at ``dump_path`` records module ``name``'s first input as the tensor
    file ``source`` recorded (``read_array``: that file as a numpy array): Max, Min, Mean in float64 numpy."""
    recorded = step_data(source, 0)[name]["input_args"][0]
    dumped = step_data(dump_path, 0)[name]["input_args"][0]
    values = np.asarray(read_array(source / "step0" / "rank" / "dump_tensor_data" / recorded["data_name"]),
                        dtype=np.float64)
    for key, reduce in (("Max", np.max), ("Min", np.min), ("Mean", np.mean)):
        assert dumped[key] == pytest.approx(float(reduce(values)), rel=1e-6, abs=1e-6)


def assert_load_cuts_off_upstream(debugger_class: Any, run: Any, source: Path, expected: dict, directory: Path,
                                  name: str, upstream: str, loaded: str) -> None:
    """``load`` of module ``name`` from the clean dump ``source``: ``run(debugger)`` (a forward of the faulted
    model returning float64 outputs by key; ``None``: bare) gives the clean ``expected[loaded]`` again while
    ``upstream`` still runs faulted, and, with ``dump_after_load`` false, writes no dump."""
    bare = run(None)
    assert not np.array_equal(bare[loaded], expected[loaded])  # the upstream fault reaches it without load
    debugger = debugger_class(config_path=load_config(directory, "load", {"path": str(source), "modules": [name]}))
    observed = run(debugger)
    debugger.finish()
    assert not np.array_equal(observed[upstream], expected[upstream])  # the upstream module itself runs faulted
    assert np.array_equal(observed[loaded], expected[loaded])  # on the recorded inputs: the clean output
    assert not (directory / "load" / "step0").exists()  # dump_after_load defaults to false: nothing dumped


def assert_mismatch_refused(debugger_class: Any, run: Any, source: Path, directory: Path, name: str,
                            error: type, recorded: str, observed: str) -> None:
    """``run(debugger)`` with inputs of another shape than ``source`` recorded for ``name``: refused in one line
    naming the module, input 0 and both shapes."""
    debugger = debugger_class(config_path=load_config(directory, "shape", {"path": str(source), "modules": [name]}))
    with pytest.raises(error) as caught:
        run(debugger)
    debugger.finish()
    message = str(caught.value)
    assert "\n" not in message and name in message and "input 0" in message
    assert recorded in message and observed in message


def framed_step(debugger: Any, model: Any, forward: Any, hooks: Iterable[Any]) -> None:
    """``forward()`` inside start/stop/step of ``debugger`` (None: bare); the test's own ``hooks`` are removed
    afterwards, also when ``forward`` raises."""
    try:
        if debugger is not None:
            debugger.start(model)
        forward()
        if debugger is not None:
            debugger.stop()
            debugger.step()
    finally:
        for hook in hooks:
            hook.remove()
