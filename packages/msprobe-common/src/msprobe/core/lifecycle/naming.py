"""The one grammar of entry names (docs/dump_format.md#entry-names), shared by both frameworks, the selector
and compare.

Two shapes exist, and everything downstream (filters, compare's alignment, the file names of saved
tensors) depends on them being built and read the same way everywhere:

- API:    ``{Prefix}.{api}.{count}.{forward|backward}`` — ``Torch.linalg.norm.0.forward``
- module: ``{Module|Cell}.{path}.{Class}.{forward|backward}.{count}`` — ``Module.layers.0.Attn.forward.3``

API names and module paths may contain dots, so names are parsed from the right: a final number
means the module shape, a final direction means the API shape.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from msprobe.core.services.log import logger

FORWARD, BACKWARD = "forward", "backward"
DIRECTIONS = (FORWARD, BACKWARD)
MODULE_KINDS = ("Module", "Cell")
TENSOR_PARTS = ("input", "kwargs", "output")
WHOLE = ""  # the "part" of an entry whose value is itself the saved value (level debug, parameters_grad)
PARAMETERS_GRAD = "parameters_grad"
MAX_FILE_NAME_BYTES = 255

_HASH_CHARS = 16
_SUFFIX = re.compile(r"(\.[A-Za-z0-9]{1,16})?")
_UNSAFE_FILE_CHARS = re.compile(r"[\x00-\x1f\x7f/\\]")


def safe_module_parts(path: str, cls: str) -> tuple[str, str]:
    """A module's attribute path and class name made usable in an entry name, for the module/cell hooks.

    A model may register a submodule under any string (``setattr(model, "..", block)``; MindSpore
    cells likewise), and a class may be named anything. Such names cannot go into an entry name
    (empty dot-separated parts break :func:`parse_name`) nor into a file name (separators, control
    characters), and raising from a forward pre-hook would break the user's training, so they are
    repaired instead: in every dot-separated part of ``path``, path separators and control characters
    become ``_`` and an empty part becomes ``_`` (``..`` -> ``_._._``); in ``cls`` dots become ``_`` as
    well. Names that need no repair come back unchanged; a repaired one is logged once.
    """
    return _safe_module_parts(str(path), str(cls))


@functools.lru_cache(maxsize=4096)  # asked on every module call: a repeat costs one dictionary lookup
def _safe_module_parts(path: str, cls: str) -> tuple[str, str]:
    safe_path = ".".join(_UNSAFE_FILE_CHARS.sub("_", part) or "_" for part in path.split("."))
    safe_cls = _UNSAFE_FILE_CHARS.sub("_", cls.replace(".", "_")) or "_"
    if (safe_path, safe_cls) != (path, cls):
        logger.warning(
            f"module {path!r} of class {cls!r} cannot be named as it is (empty parts, separators or "
            f"control characters); its entries are named with path {safe_path!r} and class {safe_cls!r}"
        )
    return safe_path, safe_cls


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count {count!r} is not a non-negative integer")


def _check_tokens(what: str, text: str) -> None:
    if not text or any(not token for token in text.split(".")):
        raise ValueError(f"{what} {text!r} is empty or has an empty dot-separated part")


@functools.lru_cache(maxsize=65536, typed=True)  # per recorded call; names recur every step
def api_name(prefix: str, api: str, count: int, direction: str) -> str:
    """``Torch.add.0.forward``; ``api`` may contain dots (``linalg.norm``), ``prefix`` may not."""
    if "." in prefix:
        raise ValueError(f"API prefix {prefix!r} must not contain a dot")
    _check_tokens("API prefix", prefix)
    _check_tokens("API name", api)
    _check_count(count)
    _check_direction(direction)
    return f"{prefix}.{api}.{count}.{direction}"


@functools.lru_cache(maxsize=65536, typed=True)  # as api_name: asked for every module call, repeats every step
def module_name(kind: str, path: str, cls: str, direction: str, count: int) -> str:
    """``Module.conv1.Conv2d.forward.0``: ``kind`` is Module or Cell, ``path`` the dotted attribute path."""
    if kind not in MODULE_KINDS:
        raise ValueError(f"module kind {kind!r} is not one of {', '.join(MODULE_KINDS)}")
    _check_tokens("module path", path)
    if "." in cls:
        raise ValueError(f"module class {cls!r} must not contain a dot")
    _check_tokens("module class", cls)
    _check_direction(direction)
    _check_count(count)
    return f"{kind}.{path}.{cls}.{direction}.{count}"


def parameters_grad_name(kind: str, path: str, cls: str, count: int) -> str:
    """``Module.fc2.Linear.parameters_grad.0``: a module's (cell's) parameter gradients of one backward pass,
    counted per module and step (docs/dump_format.md#parameters_grad). Not an API or module call name:
    :func:`parse_name` refuses it, so filters and compare's pairing by call leave it alone."""
    return module_name(kind, path, cls, FORWARD, count).replace(f".{FORWARD}.", f".{PARAMETERS_GRAD}.")


def debug_names(name: str, count: int) -> tuple[str, str]:
    """The entries of the ``count``-th ``save(variable, name)`` of a step: ``{name}.{count}.debug`` and its
    gradient's ``{name}_grad.{count}.debug`` (docs/dump_format.md#debugjson)."""
    _check_count(count)
    return f"{name}.{count}.debug", f"{name}_grad.{count}.debug"


@dataclass(frozen=True)
class EntryName:
    """A parsed entry name. For modules ``api`` holds the module path and ``cls`` its class."""

    kind: str  # "api" | "module"
    prefix: str
    api: str
    cls: str | None
    count: int
    direction: str

    @property
    def full(self) -> str:
        return self.twin(self.direction)

    @property
    def is_module(self) -> bool:
        return self.kind == "module"

    def twin(self, direction: str) -> str:
        """The full name of this entry in ``direction`` (the forward of a backward and vice versa)."""
        if self.kind == "module":
            return module_name(self.prefix, self.api, self.cls or "", direction, self.count)
        return api_name(self.prefix, self.api, self.count, direction)


def parse_name(name: str) -> EntryName:
    """Read a full entry name from the right; ``ValueError`` naming ``name`` when it has neither shape."""
    tokens = name.split(".") if isinstance(name, str) else []
    if any(not token for token in tokens):
        raise ValueError(f"entry name {name!r} is empty or has an empty dot-separated part")
    if len(tokens) >= 5 and tokens[-1].isdigit() and tokens[-2] in DIRECTIONS:
        if tokens[0] not in MODULE_KINDS:
            raise ValueError(
                f"entry name {name!r} has the module shape but kind {tokens[0]!r} is not one of "
                f"{', '.join(MODULE_KINDS)}"
            )
        return EntryName("module", tokens[0], ".".join(tokens[1:-3]), tokens[-3], int(tokens[-1]), tokens[-2])
    if len(tokens) >= 4 and tokens[-1] in DIRECTIONS and tokens[-2].isdigit():
        return EntryName("api", tokens[0], ".".join(tokens[1:-2]), None, int(tokens[-2]), tokens[-1])
    raise ValueError(
        f"entry name {name!r} is neither an API name like 'Torch.add.0.forward' nor a module name "
        f"like 'Module.fc.Linear.forward.0'"
    )


def direction_of(name: str) -> str | None:
    """``forward`` or ``backward`` for an entry name, None for a name of neither shape (a parameters_grad or
    debug entry, a group of the graph)."""
    try:
        return parse_name(name).direction
    except ValueError:
        return None


@functools.lru_cache(maxsize=65536, typed=True)  # parsed and rebuilt up to 3 times per recorded call otherwise
def backward_name(forward_name: str) -> str:
    """The backward entry name of a forward entry name."""
    entry = parse_name(forward_name)
    if entry.direction != FORWARD:
        raise ValueError(f"entry name {forward_name!r} is not a forward name")
    return entry.twin(BACKWARD)


class CallCounter:
    """0-based call counts per key (an API like ``Torch.add`` or a module path), reset each step."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def next(self, key: str) -> int:
        count = self._counts.get(key, 0)
        self._counts[key] = count + 1
        return count

    def reset(self) -> None:
        self._counts.clear()


def tensor_file_name(entry: str, part: str, index: Sequence[int | str], suffix: str) -> str:
    """The file name of a saved tensor: ``{entry}.{part}.{i.j...}{suffix}`` (docs/dump_format.md#tensor-files);
    ``{entry}.{i.j...}{suffix}`` for part :data:`WHOLE` (``x.0.debug.a.pt``,
    ``Module.fc.Linear.parameters_grad.0.weight.pt``).

    The result is always a single safe path component: separators, NUL and control characters become
    ``_`` and ``..`` cannot appear. A name over 255 bytes keeps its start and ``suffix`` and gets a hash
    of the whole name in between, so the same tensor always maps to the same file (``data_name`` in
    dump.json carries the file's real name).
    """
    if part not in TENSOR_PARTS and part != WHOLE:
        raise ValueError(f"tensor part {part!r} is not one of {', '.join(TENSOR_PARTS)} or '' (the whole entry)")
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"tensor file suffix {suffix!r} is not a dot and letters/digits like '.pt'")
    raw = ".".join([entry, *([part] if part else []), *(str(i) for i in index)]) + suffix
    name = _safe_component(raw)
    if len(name.encode("utf-8")) <= MAX_FILE_NAME_BYTES:
        return name
    digest = hashlib.sha256(raw.encode("utf-8", errors="surrogatepass")).hexdigest()[:_HASH_CHARS]
    tail = f".{digest}{suffix}"
    room = MAX_FILE_NAME_BYTES - len(tail)
    head = name.encode("utf-8")[:room].decode("utf-8", errors="ignore").rstrip(".")
    return head + tail


def _safe_component(text: str) -> str:
    """Turn separators and control characters into ``_`` and break every ``..`` (``a..pt`` -> ``a_.pt``,
    so a suffix's own dot survives); a leading dot would hide the file, so it becomes ``_`` too."""
    text = _UNSAFE_FILE_CHARS.sub("_", text)
    while ".." in text:
        text = text.replace("..", "_.")
    return "_" + text[1:] if text.startswith(".") else text
