"""The user mapping files of msprobe 1.1.1's cross-framework compare: ``-am``, ``-cm``, ``-dm``, ``-lm``.

All four are small YAML files of one fixed shape each, so rather than a YAML library :func:`load_yaml` reads
the subset they use, and anything else is an error naming the file and line. Which spellings are accepted
besides what 1.1.1 documents (decided from what its code reads): docs/cross_framework_compare.md#111s-mapping-files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprobe.core.compare.read.reader import INPUT_MAX_BYTES, CompareError

TOP_LAYER = "TopLayer"
_OLD_TOP_LAYER = "Cell"
_INT = re.compile(r"-?\d+")


@dataclass
class UserMaps:
    """What ``-am``/``-cm``/``-lm`` files say, merged over the built-in tables (``framework_map``)."""

    apis: dict[str, str] = field(default_factory=dict)  # Functional.abs -> Torch.abs
    arguments: dict[str, dict[str, str | None]] = field(default_factory=dict)  # ms api -> {input.1: input.0}
    outputs: dict[str, dict[str, str | None]] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)  # fc2.Dense -> fc2.Linear
    layers: dict[str, dict[str, str]] = field(default_factory=dict)  # Layer class -> {ms attr: pt attr}
    requested: bool = False  # -am / -cm / -lm given, with or without a file


def _read_text(path: str | os.PathLike, what: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise CompareError(f"{what} {str(file)!r} does not exist or is not a file")
    if file.stat().st_size > INPUT_MAX_BYTES:
        raise CompareError(f"{what} {str(file)!r} is larger than {INPUT_MAX_BYTES} bytes")
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"{what} {str(file)!r} cannot be read: {exc}") from None


def _strip_comment(line: str) -> str:
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if _INT.fullmatch(text):
        return int(text)
    if text in ("null", "~", ""):
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(item) for item in inner.split(",")] if inner else []
    if text[0] in "{&*|>!%@`":
        raise ValueError(f"{text!r} uses YAML this reader does not support (flow mappings, anchors, blocks)")
    return text


def _split_key(text: str) -> tuple[str, str] | None:
    """``key: value`` → (key, value); a quoted key may contain ``: ``; None when the line is no mapping."""
    if text[:1] in "'\"":
        end = text.find(text[0], 1)
        if end > 0 and text[end + 1:end + 2] == ":" and text[end + 2:end + 3] in ("", " "):
            return text[1:end], text[end + 2:].strip()
        return None
    match = re.search(r":(\s|$)", text)
    if not match:
        return None
    return text[:match.start()].strip(), text[match.end():].strip()


def load_yaml(path: str | os.PathLike, what: str) -> Any:
    """The YAML subset described in the module docstring; errors name ``what``, the file and the line."""
    lines = []
    for number, raw in enumerate(_read_text(path, what).splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise CompareError(f"{what} {str(path)!r} line {number}: indented with a tab; use spaces")
        line = _strip_comment(raw)
        if line.strip() and line.strip() != "---":
            lines.append((number, len(line) - len(line.lstrip()), line.strip()))
    try:
        value, end = _block(lines, 0, lines[0][1]) if lines else (None, 0)
        if end != len(lines):
            raise ValueError(f"line {lines[end][0]}: unexpected indentation")
    except ValueError as exc:
        raise CompareError(f"{what} {str(path)!r}: {exc}") from None
    return value


def _is_item(text: str) -> bool:
    return text.startswith("- ") or text == "-"


def _block(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[Any, int]:
    """The mapping or sequence whose lines start at ``start`` with ``indent``; returns it and the next index.

    A sequence ends at the first line of its indentation that is not an item, since YAML lets a key's
    items sit at the key's own indentation (``ms_args:`` then ``- 0``)."""
    is_list = _is_item(lines[start][2])
    result: Any = [] if is_list else {}
    index = start
    while index < len(lines):
        number, col, text = lines[index]
        if col < indent or (is_list and col == indent and not _is_item(text)):
            break
        if col > indent:
            raise ValueError(f"line {number}: unexpected indentation")
        if not is_list and _is_item(text):
            raise ValueError(f"line {number}: a list item where a 'key: value' line was expected")
        if is_list:
            item = text[1:].strip()
            index += 1
            if not item:
                value, index = _nested(lines, index, indent)
            elif _split_key(item) and not item.startswith("["):
                # "- key: value" opens a mapping whose further keys are indented like "key"
                inner = indent + (len(text) - len(item))
                lines[index - 1] = (number, inner, item)
                value, index = _block(lines, index - 1, inner)
            else:
                value = _scalar(item)
            result.append(value)
            continue
        pair = _split_key(text)
        if pair is None:
            raise ValueError(f"line {number}: {text!r} is not 'key: value'")
        key, rest = pair
        index += 1
        if rest:
            result[str(_scalar(key))] = _scalar(rest)
        else:
            result[str(_scalar(key))], index = _nested(lines, index, indent, same_indent_items=True)
    return result, index


def _nested(lines: list[tuple[int, int, str]], index: int, indent: int,
            same_indent_items: bool = False) -> tuple[Any, int]:
    """The value of a key (or an empty item) written on the lines below it; None when there is none."""
    if index < len(lines):
        col, text = lines[index][1], lines[index][2]
        if col > indent or (same_indent_items and col == indent and _is_item(text)):
            return _block(lines, index, col)
    return None, index


def _indices(value: Any, path: Any, block: int, key: str) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in value):
        raise CompareError(f"api mapping file {str(path)!r}, entry {block}: {key} is {value!r}; "
                           f"allowed: a list of argument positions (0, 1, ...)")
    if len(set(value)) != len(value):
        raise CompareError(f"api mapping file {str(path)!r}, entry {block}: {key} {value!r} repeats a position")
    return value


def _positions(entry: dict, path: Any, block: int, part: str, keys: tuple[str, str]) -> dict[str, str | None]:
    ms, pt = (_indices(entry.get(k), path, block, k) for k in keys)
    if len(ms) != len(pt):
        raise CompareError(f"api mapping file {str(path)!r}, entry {block}: {keys[0]} {ms} and {keys[1]} {pt} "
                           f"must list the same number of positions")
    return {f"{part}.{m}": f"{part}.{p}" for m, p in zip(ms, pt)}


def read_api_mapping(path: str | os.PathLike, into: UserMaps) -> None:
    """``-am``: ``ms_api``/``pt_api`` with optional argument and output position lists."""
    data = load_yaml(path, "api mapping file")
    entries = [] if data is None else data if isinstance(data, list) else [data]
    for block, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("ms_api"), str) or \
                not isinstance(entry.get("pt_api"), str):
            raise CompareError(f"api mapping file {str(path)!r}, entry {block}: needs 'ms_api' and 'pt_api' "
                               f"names such as 'Functional.abs' and 'Torch.abs'")
        unknown = set(entry) - {"ms_api", "pt_api", "ms_args", "pt_args", "ms_outputs", "pt_outputs",
                                "ms_output", "pt_output"}
        if unknown:
            raise CompareError(f"api mapping file {str(path)!r}, entry {block}: unknown key {sorted(unknown)[0]!r}; "
                               f"allowed: ms_api, pt_api, ms_args, pt_args, ms_outputs, pt_outputs")
        ms_api = entry["ms_api"]
        into.apis[ms_api] = entry["pt_api"]
        if "ms_args" in entry or "pt_args" in entry:
            into.arguments[ms_api] = _positions(entry, path, block, "input", ("ms_args", "pt_args"))
        out_keys = ("ms_outputs", "pt_outputs") if "ms_outputs" in entry or "pt_outputs" in entry \
            else ("ms_output", "pt_output")
        if out_keys[0] in entry or out_keys[1] in entry:
            into.outputs[ms_api] = _positions(entry, path, block, "output", out_keys)


def read_cell_mapping(path: str | os.PathLike, into: UserMaps) -> None:
    """``-cm``: ``{cell path}.{Cell class}: {module path}.{Module class}``."""
    data = load_yaml(path, "cell mapping file")
    if data is None:
        return
    if not isinstance(data, dict) or any(not isinstance(v, str) for v in data.values()):
        raise CompareError(f"cell mapping file {str(path)!r}: expected lines 'fc2.Dense: fc2.Linear'")
    for ms, pt in data.items():
        ms, pt = ms.removeprefix("Cell."), pt.removeprefix("Module.")
        if "." not in ms or "." not in pt:
            raise CompareError(f"cell mapping file {str(path)!r}: {ms!r}: {pt!r} must both be "
                               f"'{{path}}.{{Class}}', e.g. 'fc2.Dense: fc2.Linear'")
        into.cells[ms] = pt


def read_layer_mapping(path: str | os.PathLike, into: UserMaps) -> None:
    """``-lm``: per layer class (or containing attribute), MindSpore attribute → PyTorch attribute."""
    data = load_yaml(path, "layer mapping file")
    if data is None:
        return
    if not isinstance(data, dict) or any(not isinstance(v, dict) for v in data.values()):
        raise CompareError(f"layer mapping file {str(path)!r}: expected 'LayerClass:' lines each followed by "
                           f"indented 'mindspore_name: pytorch_name' lines")
    for layer, names in data.items():
        layer = TOP_LAYER if layer == _OLD_TOP_LAYER else layer
        if any(not isinstance(v, (str, int)) for v in names.values()):
            raise CompareError(f"layer mapping file {str(path)!r}: under {layer!r}, every value must be a name")
        into.layers.setdefault(layer, {}).update({str(k): str(v) for k, v in names.items()})


def read_user_maps(api: str | bool | None, cell: str | bool | None, layer: str | bool | None) -> UserMaps:
    """The three options as argparse gives them: None (not given), True (given without a file) or a path."""
    maps = UserMaps(requested=any(v not in (None, False) for v in (api, cell, layer)))
    for value, reader in ((api, read_api_mapping), (cell, read_cell_mapping), (layer, read_layer_mapping)):
        if isinstance(value, (str, os.PathLike)):
            reader(value, maps)
    return maps
