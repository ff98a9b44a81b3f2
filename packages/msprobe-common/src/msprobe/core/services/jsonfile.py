"""Reading a JSON file that someone else wrote (config.json, dump.json, stack.json, compare.json).

Python's ``json`` module turns hostile input into raw exceptions far from the file that caused them:
deep nesting raises ``RecursionError``, an integer of thousands of digits raises a plain
``ValueError`` (Python's 4,300-digit limit), and a huge file is read whole into memory. Every
JSON file msprobe reads goes through :func:`load_json_file`, which turns each of these into a
:class:`JsonFileError` whose ``detail`` reads after the file's name ("... is not valid JSON: ...");
callers wrap it in their own error type (``ConfigError``, ``CompareError``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100  # msprobe's own files nest about 10 levels; this leaves room and stays far from the C stack
MiB = 1 << 20


class JsonFileError(ValueError):
    """A JSON file that cannot be used; ``detail`` says why, in words that follow the file's name."""

    def __init__(self, path: str | os.PathLike, detail: str) -> None:
        self.path, self.detail = os.fspath(path), detail
        super().__init__(f"{self.path!r} {detail}")


def load_json_file(
    path: str | os.PathLike,
    max_bytes: int,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Parse ``path``; NaN and Infinity are accepted (msprobe 1.1.1 writes them).

    Refused, with a :class:`JsonFileError`: a missing path or one that is not a regular file, a file
    larger than ``max_bytes``, text that is not UTF-8 or not JSON, arrays and objects nested deeper
    than ``max_depth``, and integers longer than Python converts (``sys.get_int_max_str_digits()``).
    """
    try:
        size = os.stat(path).st_size
        if not os.path.isfile(path):
            kind = "is a directory, not a JSON file" if os.path.isdir(path) else "is not a regular file"
            raise JsonFileError(path, kind)
        if size > max_bytes:
            raise JsonFileError(path, f"is {size} bytes, more than the {max_bytes} bytes allowed for this file")
        with open(path, encoding="utf-8") as handle:
            text = handle.read(max_bytes + 1)
        if len(text) > max_bytes:
            raise JsonFileError(path, f"grew past the {max_bytes} bytes allowed for this file while being read")
    except FileNotFoundError:
        raise JsonFileError(path, "does not exist") from None
    except UnicodeDecodeError as error:
        raise JsonFileError(path, f"is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise JsonFileError(path, f"cannot be read: {error.strerror or error}") from None
    try:
        data = json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as error:
        where = f"at line {error.lineno}, column {error.colno}"
        raise JsonFileError(path, f"is not valid JSON: {error.msg} {where}") from None
    except RecursionError:
        raise JsonFileError(path, "nests arrays or objects too deeply for the JSON parser") from None
    except ValueError as error:  # Python's limit on the digits of an integer is the only other ValueError
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise JsonFileError(path, f"holds an integer of more than {limit} digits, which Python does not convert "
                                  f"({str(error).split(';')[0]})") from None
    check_depth(path, data, max_depth)
    return data


def check_depth(path: str | os.PathLike, data: Any, max_depth: int) -> None:
    """Raise when ``data`` nests lists/dicts deeper than ``max_depth``. Level by level, without recursion, so
    that it cannot overflow itself and every later (recursive) walk over the data stays safe; about a third
    of the parse time."""
    level, depth = [data], 0
    while level:
        depth += 1
        if depth > max_depth and any(isinstance(value, (dict, list)) for value in level):
            raise JsonFileError(path, f"nests arrays or objects more than {max_depth} levels deep")
        below: list[Any] = []
        for value in level:
            children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
            below += [child for child in children if isinstance(child, (dict, list))]
        level = below
