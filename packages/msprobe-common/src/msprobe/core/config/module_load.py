"""The ``load`` key: feed named modules the inputs an earlier tensor dump recorded (docs/config.md#load).

``{"load": {"path": DUMP, "modules": ["Module.layers.1.Block.forward.0"], "dump_after_load": false}}`` — the
key names, ``step``/``rank`` and the default of ``dump_after_load`` are 26.2.0's. Everything that can be
checked before training is checked here, with the rest of the file: the path is a dump directory, each
module is a module forward entry name recorded there, with tensor files of its inputs. What only the
running model can tell (a shape or dtype that differs from the recorded one) is refused where the module
is called (``msprobe.pytorch.training.load_inputs``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from msprobe.core.config.errors import MISSING, Problem
from msprobe.core.config.fields import FieldReader
from msprobe.core.config.model import ModuleLoad
from msprobe.core.lifecycle.naming import FORWARD, parse_name
from msprobe.core.services.jsonfile import JsonFileError, MiB, load_json_file
from msprobe.core.services.tree import tensors_in

DUMP_JSON_MAX_BYTES = 4096 * MiB  # as compare reads a dump.json
SOURCE_DIR_PREFIXES = ("rank", "proc")  # our rank directories, and 26.2.0's proc{pid} outside a distributed job


def read_module_load(raw: object) -> tuple[ModuleLoad | None, list[Problem]]:
    """The ``load`` value of config.json as a ModuleLoad (None when absent), with every problem found."""
    if raw is None:
        return None, []
    if not isinstance(raw, Mapping):
        return None, [Problem("load", raw, 'an object {"path": ..., "modules": [...], "dump_after_load": false}')]
    reader = FieldReader(raw, prefix="load.")
    path = reader.text("path", "", non_empty=True)
    if not reader.given("path") and "path" not in reader.invalid:
        reader.report("path", MISSING, "the directory of an earlier tensor dump (holding step{N}/rank*/dump.json)")
    modules = reader.names("modules")
    if not modules and "modules" not in reader.invalid:
        reader.report("modules", raw.get("modules", MISSING), "a non-empty list of module forward entry names "
                      "such as 'Module.layers.1.Block.forward.0'")
    _check_names(reader, modules)
    load = ModuleLoad(path, modules, reader.indices("step", ()), reader.indices("rank", ()),
                      reader.flag("dump_after_load", False))
    if not reader.invalid:
        _check_dump(reader, load)
    return (None if reader.problems else load), reader.problems


def _check_names(reader: FieldReader, modules: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for index, name in enumerate(modules):
        try:
            entry = parse_name(name)
            wrong = not entry.is_module or entry.direction != FORWARD
        except ValueError:
            wrong = True
        if wrong:
            reader.report("modules", name, "a module forward entry name such as 'Module.layers.1.Block.forward.0'",
                          index)
        elif name in seen:
            reader.report("modules", name, "each module once", index)
        seen.add(name)


def source_dirs(path: str | os.PathLike, steps: tuple[int, ...] = (), ranks: tuple[int, ...] = ()) -> Iterator[Path]:
    """The rank directories (``step{N}/rank{R}``, ``step{N}/proc{pid}``) of the dump at ``path`` holding a
    dump.json, in the given steps and ranks (all when empty)."""
    root = Path(path)
    for step_dir in sorted(root.glob("step*")):
        if steps and not (step_dir.name[4:].isdigit() and int(step_dir.name[4:]) in steps):
            continue
        for rank_dir in sorted(step_dir.iterdir()):
            rank_text = rank_dir.name[4:]
            if not rank_dir.name.startswith(SOURCE_DIR_PREFIXES) or not (rank_dir / "dump.json").is_file():
                continue
            if ranks and rank_dir.name.startswith("rank") and not (rank_text.isdigit() and int(rank_text) in ranks):
                continue
            yield rank_dir


def _check_dump(reader: FieldReader, load: ModuleLoad) -> None:
    if not os.path.isdir(load.path):
        reader.report("path", load.path, "an existing directory: an earlier tensor dump (step{N}/rank*/dump.json)")
        return
    wanted = set(load.modules)
    found: dict[str, bool] = {}  # module -> its inputs have tensor files
    dirs = list(source_dirs(load.path, load.step, load.rank))
    for rank_dir in dirs:
        try:
            data = load_json_file(rank_dir / "dump.json", DUMP_JSON_MAX_BYTES).get("data", {})
        except (JsonFileError, AttributeError) as error:
            reader.report("path", load.path, f"a dump whose dump.json files can be read ({error})")
            return
        for name in wanted & data.keys():
            found[name] = found.get(name, False) or _has_tensor_files(data[name])
    if not dirs:
        reader.report("path", load.path, "a dump directory holding step{N}/rank*/dump.json (none found"
                      + (" in the load.step/load.rank given)" if load.step or load.rank else ")"))
        return
    for index, name in enumerate(load.modules):
        if name not in found:
            reader.report("modules", name, f"a module recorded in the dump at {load.path} (dumped at level L0 or mix)",
                          index)
        elif not found[name]:
            reader.report("modules", name, f"a module whose inputs the dump at {load.path} saved as tensor files "
                          "(task tensor)", index)


def _has_tensor_files(entry: object) -> bool:
    """Whether a module entry's inputs name a tensor file (task tensor), or it had no tensor input at all."""
    if not isinstance(entry, Mapping):
        return False
    values = tensors_in([entry.get("input_args"), entry.get("input_kwargs")], _is_tensor_record)
    return not values or any(isinstance(v.get("data_name"), str) and v["data_name"] not in ("", "-1") for v in values)


def _is_tensor_record(value: object) -> bool:
    return isinstance(value, Mapping) and "shape" in value and "dtype" in value
