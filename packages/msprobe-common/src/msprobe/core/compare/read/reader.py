"""Read the inputs of a comparison: dump.json and stack.json (ours, msprobe 1.1.1's and 26.2.0's), mapping files.

Only the JSON is read up front; tensors stay on disk until a worker needs them (see
:func:`tensor_path`), so memory does not grow with the dump. Every error names the file it is about,
because a compare usually involves four or five files and "invalid JSON" alone helps nobody.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.dump.json_files import TENSOR_DIR, stack_members
from msprobe.core.services import jsonfile
from msprobe.core.services.jsonfile import MiB

MODES = ("tensor", "summary", "md5")


class CompareError(ValueError):
    """The inputs of a comparison are missing, unreadable or do not fit together."""


@dataclass
class DumpFile:
    """One side of a comparison: the entries of a dump.json in execution order, and where its tensors are."""

    path: Path
    task: str
    level: str
    entries: dict[str, dict]
    tensor_dir: Path
    stacks: dict[str, list[str]] = field(default_factory=dict)
    recorded_framework: str | None = None  # dump.json's "framework" field, where a writer records one

    @property
    def framework(self) -> str | None:
        """``pytorch`` or ``mindspore``: the recorded field, else what the entries show (see :func:`framework_of`)."""
        return self.recorded_framework or framework_of(self.entries)

    @property
    def mode(self) -> str:
        """tensor, md5 or summary (docs/compare.md#mode: the mode follows the dump)."""
        if self.task == "tensor":
            return "tensor"
        return "md5" if _has_md5(self.entries) else "summary"


_FRAMEWORK_OF_TYPE = {"torch.Tensor": "pytorch", "torch.nn.parameter.Parameter": "pytorch",
                      "mindspore.Tensor": "mindspore"}
_FRAMEWORK_OF_PREFIX = {"Module": "pytorch", "Torch": "pytorch", "Aten": "pytorch", "NPU": "pytorch",
                        "VF": "pytorch", "Cell": "mindspore", "Mint": "mindspore", "MintFunctional": "mindspore",
                        "Primitive": "mindspore", "Jit": "mindspore"}
FRAMEWORKS = ("pytorch", "mindspore")


def framework_of(entries: dict[str, dict], sample: int = 200) -> str | None:
    """Which framework wrote a dump, from its first ``sample`` entries: the tensor type (``torch.Tensor``,
    ``mindspore.Tensor``) decides, else a framework-only name prefix (``Module``/``Torch`` or
    ``Cell``/``Mint``/``Primitive``); None when neither shows (an empty dump, scalars only under
    ``Functional``/``Tensor``, which both frameworks use). msprobe 1.1.1's dump.json records no framework."""
    by_prefix = None
    for index, (name, entry) in enumerate(entries.items()):
        if index >= sample:
            break
        for value in entry.get("input_args") or entry.get("input") or entry.get("output") or ():
            found = _FRAMEWORK_OF_TYPE.get(value.get("type")) if isinstance(value, dict) else None
            if found:
                return found
        by_prefix = by_prefix or _FRAMEWORK_OF_PREFIX.get(name.split(".", 1)[0])
    return by_prefix


def _has_md5(entries: dict[str, dict]) -> bool:
    def walk(value: Any) -> bool:
        if isinstance(value, dict):
            return "md5" in value or any(walk(v) for v in value.values())
        if isinstance(value, list):
            return any(walk(v) for v in value)
        return False

    return any(walk(entry) for entry in entries.values())


DUMP_MAX_BYTES = 4 << 30  # dump.json / stack.json: parsed, 4 GiB of JSON already takes tens of GiB of memory
INPUT_MAX_BYTES = 16 * MiB  # compare.json


def load_json_file(path: Path, what: str, max_bytes: int = DUMP_MAX_BYTES) -> Any:
    """Parse ``path`` through the shared safe loader; every error names the file and its role ``what``."""
    try:
        return jsonfile.load_json_file(path, max_bytes)
    except jsonfile.JsonFileError as exc:
        raise CompareError(f"{what} {str(path)!r} {exc.detail}") from None


def read_dump(path: str | os.PathLike, what: str = "dump file") -> DumpFile:
    """Read a dump.json; ``what`` (e.g. ``"npu_path"``) names the role of the file in error messages."""
    json_path = Path(path)
    obj = load_json_file(json_path, what)
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        raise CompareError(f"{what} {str(json_path)!r} has no 'data' object: is it a dump.json written by msprobe?")
    task = obj.get("task")
    if not isinstance(task, str):
        raise CompareError(f"{what} {str(json_path)!r}: 'task' is {task!r}, expected a string such as 'tensor'")
    bad = [name for name, entry in obj["data"].items() if not isinstance(entry, dict)]
    if bad:
        raise CompareError(f"{what} {str(json_path)!r}: entry {bad[0]!r} is not a JSON object")
    framework = obj.get("framework")
    if framework is not None and framework not in FRAMEWORKS:
        raise CompareError(f"{what} {str(json_path)!r}: 'framework' is {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    return DumpFile(
        path=json_path,
        task=task,
        level=str(obj.get("level", "")),
        entries=obj["data"],
        tensor_dir=_tensor_dir(json_path, obj.get("dump_data_dir")),
        recorded_framework=framework,
    )


def read_construct(dump: DumpFile) -> dict[str, str | None]:
    """construct.json beside a dump.json: entry name → the module entry it ran inside (None at top level);
    empty when the file is missing (level L1 dumps of 1.1.1 have none)."""
    path = dump.path.parent / "construct.json"
    if not path.is_file():
        return {}
    obj = load_json_file(path, "construct file")
    if not isinstance(obj, dict) or any(v is not None and not isinstance(v, str) for v in obj.values()):
        raise CompareError(f"construct.json {str(path)!r} is not a JSON object of entry name → parent name or null")
    return obj


def _tensor_dir(json_path: Path, recorded: Any) -> Path:
    """``dump_tensor_data`` next to the dump.json when it exists; else ``dump_data_dir`` when that is an
    existing absolute directory; else ``dump_tensor_data`` next to the dump.json anyway.

    The tensors of a dump sit next to its dump.json, also in a copy of the dump; the recorded directory
    is the original's (or, from 1.1.1, relative to wherever it was run), so it comes second.
    """
    beside = json_path.parent / TENSOR_DIR
    if beside.is_dir():
        return beside
    if isinstance(recorded, str) and recorded and Path(recorded).is_absolute() and Path(recorded).is_dir():
        return Path(recorded)
    return beside


def read_stack(path: str | os.PathLike) -> dict[str, list[str]]:
    """stack.json: forward entry name → frames (a list of strings, or 1.1.1's nested lists), from either
    form (``{entry: frames}`` or 26.2.0's groups, :func:`msprobe.core.dump.json_files.stack_members`)."""
    obj = load_json_file(Path(path), "stack_path")
    if not isinstance(obj, dict):
        raise CompareError(f"stack_path {str(path)!r} is not a JSON object of entry name → frames")
    return {name: _frames(frames) for name, frames in stack_members(obj)}


def _frames(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [line for item in value for line in _frames(item)]
    return [] if value is None else [str(value)]


def read_mapping(path: str | os.PathLike) -> dict[str, str]:
    """A ``-dm`` data mapping file: one ``npu name: bench name`` per line, ``#`` starts a comment.

    This is the whole of the format 1.1.1 documents (a flat YAML mapping of names), so it is parsed
    here rather than pulling in a YAML library. Names are entry names or row names.
    """
    mapping_path = Path(path)
    if not mapping_path.is_file():
        raise CompareError(f"data mapping file {str(mapping_path)!r} does not exist or is not a file")
    if mapping_path.stat().st_size > INPUT_MAX_BYTES:
        raise CompareError(f"data mapping file {str(mapping_path)!r} is larger than {INPUT_MAX_BYTES} bytes")
    try:
        text = mapping_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"data mapping file {str(mapping_path)!r} cannot be read: {exc}") from None
    mapping: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        left, sep, right = line.partition(": ")
        if not sep or not left.strip() or not right.strip():
            raise CompareError(
                f"data mapping file {str(mapping_path)!r} line {number}: {raw.strip()!r} is not "
                f"'npu_name: bench_name'"
            )
        mapping[left.strip().strip("'\"")] = right.strip().strip("'\"")
    return mapping


def tensor_path(dump: DumpFile, value: dict) -> Path | None:
    """The file of a saved tensor value, or None when the value records none."""
    name = value.get("data_name")
    if not isinstance(name, str) or not name or name == "-1":
        return None
    if os.sep in name or "/" in name or name in (".", ".."):
        raise CompareError(f"{str(dump.path)!r}: data_name {name!r} is not a plain file name")
    return dump.tensor_dir / name
