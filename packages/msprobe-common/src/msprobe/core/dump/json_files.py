"""dump.json, stack.json and construct.json of one step and rank (docs/dump_format.md,
docs/pytorch/dump.md#durability-the-training-run-always-goes-on).

The files parse to exactly what msprobe 1.1.1 writes (non-finite numbers as bare ``NaN``/``Infinity``
tokens, which its tools read); each entry sits on one line of its own, compactly rendered by json's C
encoder (1.1.1's indent=1 layout took json's pure-Python encoder and a third of the dump's time). The
files are never held whole in memory:
each entry is rendered when it is added, rendered entries are streamed in chunks to a hidden
temporary file next to the target, and :meth:`StepWriter.close` completes the JSON and renames the
temporary file into place. A reader (or a crash) therefore finds each file absent or complete, and a
write error (a full disk) costs only the step being written: :meth:`StepWriter.abort` removes its
temporary files and leaves every file already renamed into place as it was.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe.core.config.model import DEBUG_LEVEL
from msprobe.core.lifecycle.layout import DEFAULT_DUMP_FORMAT, claim_step_dir, step_dir
from msprobe.core.services.fileio import PendingFile, atomic_write_text, make_dir
from msprobe.core.services.log import logger

DUMP_FILE, STACK_FILE, CONSTRUCT_FILE = "dump.json", "stack.json", "construct.json"
DEBUG_FILE = "debug.json"  # level debug: the variables PrecisionDebugger.save recorded, alone
TENSOR_DIR = "dump_tensor_data"
CHUNK_ENTRIES = 1000
CHUNK_BYTES = 8 * 1024 * 1024

__all__ = ["DumpIdentity", "StepWriter", "json_text", "quoted", "read_json", "stack_members", "step_dir",
           "write_json_atomic"]


@dataclass(frozen=True)
class DumpIdentity:
    """Which dump a step's files belong to: where it goes, the task, level and framework, whether it has
    tensor files, and which generation's layout its files follow (``dump_format``, docs/dump_format.md). The
    task's build makes it once from the configuration and every part down to the :class:`StepWriter` receives
    this one value, rather than the same keywords relayed constructor by constructor."""

    dump_path: str
    task: str
    level: str
    framework: str
    with_tensors: bool = False
    dump_format: str = DEFAULT_DUMP_FORMAT

    @classmethod
    def of(cls, config: Any, *, with_tensors: bool) -> DumpIdentity:
        """The identity of the dump a :class:`~msprobe.core.config.DebuggerConfig` configures."""
        return cls(config.dump_path, config.task, config.level, config.framework, with_tensors, config.dump_format)

    def header(self, data_dir: str | None) -> dict:
        """dump.json without its entries: 26.2.0's records the framework after the level, 1.1.1's does not."""
        if self.dump_format == "26":
            return {"task": self.task, "level": self.level, "framework": self.framework, "dump_data_dir": data_dir,
                    "data": {}}
        return {"task": self.task, "level": self.level, "dump_data_dir": data_dir, "data": {}}


def json_text(obj: Any) -> str:
    """The one JSON formatting of every msprobe file (1.1.1's: indent 1, NaN/Infinity tokens)."""
    return json.dumps(obj, indent=1)


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write a small JSON file whole, through a temporary file and a rename."""
    atomic_write_text(path, json_text(obj))


@functools.lru_cache(maxsize=65536)
def quoted(name: str) -> str:
    """A name (an entry's, a keyword argument's) as a JSON string: the same names recur in every step, and
    json.dumps costs ≈ 2 µs a call, three times per entry (dump.json, stack.json and construct.json)."""
    return json.dumps(name)


def stack_members(obj: dict) -> Iterator[tuple[str, Any]]:
    """(entry name, frames) of a parsed stack.json in either form: ``{entry: frames}`` (1.1.1's and this
    project's default) or 26.2.0's grouped ``{"0": [[entry, ...], [frame, ...]], ...}``, one group per distinct
    stack. An entry name is never a bare number, so a digit key with a pair of lists is a group."""
    for key, value in obj.items():
        if key.isdigit() and isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
            for name in value[0]:
                yield str(name), value[1]
        else:
            yield key, value


@functools.lru_cache(maxsize=4096)
def _frames_json(frames: tuple[str, ...]) -> str:
    """A stack's JSON text: the same few call sites' stacks recur in every step, and rendering a list of
    long strings cost as much as capturing it."""
    return json.dumps(list(frames))


class _JsonObjectStream:
    """One JSON object written member by member, one member per line, ``depth`` levels deep inside
    ``head ... tail``."""

    def __init__(self, target: Path, head: str, depth: int, tail: str) -> None:
        self.target = target
        self._head, self._tail = head, tail
        self._indent = " " * depth
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._file: PendingFile | None = None
        self._members = 0

    def add(self, key: str, value: Any) -> None:
        # One member per line, rendered by json's C encoder: pretty-printing (indent) takes json's
        # pure-Python path, which cost a third of the dump's time on a small transformer.
        self.add_rendered(key, json.dumps(value))

    def add_rendered(self, key: str, rendered: str) -> None:
        """A member whose value is already JSON text."""
        member = f"{',' if self._members else '{'}\n{self._indent}{quoted(key)}: {rendered}"
        self._members += 1
        self._pending.append(member)
        self._pending_bytes += len(member)
        if len(self._pending) >= CHUNK_ENTRIES or self._pending_bytes >= CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        """Move the pending members to the temporary file (the target stays untouched)."""
        if self._file is None:
            self._file = PendingFile(self.target)
            self._file.write(self._head.encode("utf-8"))
        self._file.write("".join(self._pending).encode("utf-8"))
        self._file.flush()  # on disk now: a full disk is found at this chunk, not at the end
        self._pending.clear()
        self._pending_bytes = 0

    def close(self) -> None:
        """Complete the object, sync, and rename the temporary file onto the target."""
        self.flush()
        closing = f"\n{self._indent[:-1]}}}" if self._members else "{}"
        self._file.write((closing + self._tail).encode("utf-8"))
        self._file.commit(sync=True)
        self._file = None  # only now: after a failure discard() still finds the temporary file

    def discard(self) -> None:
        """Drop what was streamed (after a write error): no temporary file stays behind."""
        pending, self._file = self._file, None
        self._pending.clear()
        if pending is not None:
            pending.discard()


class _GroupedStacks:
    """26.2.0's grouped stack.json: the entries of one distinct stack share a group, numbered in order of
    first use. A group may grow until the step ends, so the groups are held and written at :meth:`close`
    (a step's distinct stacks are few; the names are already held by the writer)."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self._groups: dict[tuple[str, ...], list[str]] = {}
        self._stream = _JsonObjectStream(target, "", 1, "")

    def add(self, name: str, frames: list[str]) -> None:
        self._groups.setdefault(tuple(frames), []).append(name)

    def flush(self) -> None:
        """Nothing to stream before the step ends (a group's members are complete only then)."""

    def close(self) -> None:
        for index, (frames, names) in enumerate(self._groups.items()):
            self._stream.add_rendered(str(index), f"[{json.dumps(names)}, {_frames_json(frames)}]")
        self._stream.close()

    def discard(self) -> None:
        self._groups.clear()
        self._stream.discard()


class StepWriter:
    """Collects one step's entries for one rank and writes its three JSON files at :meth:`close`.

    Entries come in execution order, as JSON-ready values (:meth:`add`) or already rendered to their
    line of JSON (:meth:`add_rendered`). A second writer for the same step and rank in the same run
    (``start``/``stop`` twice in a step) continues the files the first one wrote.
    """

    def __init__(self, identity: DumpIdentity, step: int, rank: int | None) -> None:
        self.directory = claim_step_dir(identity.dump_path, step, rank, identity.dump_format)
        self._tensor_dir = self.directory / TENSOR_DIR
        self._tensor_dir_made = False
        empty_dump = json_text(identity.header(str(self._tensor_dir) if identity.with_tensors else None))
        head, tail = empty_dump[: -len("{}\n}")], "\n}"  # "data" is last: its members stream in between
        debug = identity.level == DEBUG_LEVEL  # debug.json alone: saved variables have no stack or place
        self._dump = _JsonObjectStream(self.directory / (DEBUG_FILE if debug else DUMP_FILE), head, 2, tail)
        grouped = identity.dump_format == "26"
        self._stack = _GroupedStacks(self.directory / STACK_FILE) if grouped else _JsonObjectStream(
            self.directory / STACK_FILE, "", 1, "")
        self._construct = _JsonObjectStream(self.directory / CONSTRUCT_FILE, "", 1, "")
        self._files = (self._dump,) if debug else (self._dump, self._stack, self._construct)
        self._names: set[str] = set()
        self._closed = False
        self._continue_earlier_files()

    @property
    def tensor_dir(self) -> Path:
        """``.../dump_tensor_data``, created (and checked) on first use only: this is asked once per
        saved tensor, and checking every parent each time cost more than a small tensor's file."""
        if not self._tensor_dir_made:
            make_dir(self._tensor_dir)
            self._tensor_dir_made = True
        return self._tensor_dir

    def add(self, name: str, entry: dict) -> None:
        self.add_rendered(name, json.dumps(entry))

    def add_rendered(self, name: str, text: str) -> None:
        """An entry already rendered to its one line of JSON (:func:`msprobe.core.dump.encode.render`)."""
        self._check_open()
        if name in self._names:
            logger.warning(f"entry {name} was already written in this step; keeping the first one")
            return
        self._names.add(name)
        self._dump.add_rendered(name, text)

    def add_stack(self, name: str, frames: list[str]) -> None:
        self._check_open()
        if isinstance(self._stack, _GroupedStacks):
            self._stack.add(name, frames)
        else:
            self._stack.add_rendered(name, _frames_json(tuple(frames)))

    def add_construct(self, name: str, parent: str | None) -> None:
        self._check_open()
        self._construct.add_rendered(name, "null" if parent is None else quoted(parent))

    def flush(self) -> None:
        """Stream every pending entry to the temporary files now."""
        self._check_open()
        for stream in self._streams():
            stream.flush()

    def close(self) -> None:
        """Finish the three files; each appears complete in one rename. Closing twice is harmless.

        A write error leaves the files renamed so far complete and removes every temporary file."""
        if self._closed:
            return
        self._closed = True
        try:
            for stream in self._streams():
                stream.close()
        except BaseException:
            self.abort()
            raise
        logger.debug(f"wrote {len(self._names)} entries to {self._dump.target}")

    def abort(self) -> None:
        """Give up this step after a write error: the temporary files go, complete files stay."""
        self._closed = True
        for stream in self._streams():
            stream.discard()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the writer of {self.directory} is closed; start a new one for more entries")

    def _continue_earlier_files(self) -> None:
        """Take over what an earlier writer of this run left here (the directory is ours: a foreign
        one was moved aside when it was claimed)."""
        targets = (stream.target for stream in self._streams())
        earlier = {path.name: read_json(path) for path in targets if path.exists()}
        for name, entry in earlier.get(self._dump.target.name, {}).get("data", {}).items():
            self.add(name, entry)
        for name, frames in stack_members(earlier.get(STACK_FILE, {})):
            self.add_stack(name, frames)
        for name, parent in earlier.get(CONSTRUCT_FILE, {}).items():
            self.add_construct(name, parent)

    def _streams(self) -> tuple[_JsonObjectStream | _GroupedStacks, ...]:
        return self._files
