"""Names from dump.json reach a CSV, an HTML page, an inline script and the log: escape each context.

Entry names and stack frames come from files anyone could have written. Left as they are, a name
starting with ``=`` becomes a formula when the CSV is opened in a spreadsheet, ``<!--<script>`` or
``</script>`` inside the page's data literal ends or derails its script, and a newline in a logged
name forges a log line. Each output goes through the one function here for its context.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan|infinity)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula gets a leading ``'``; numbers, and text that is a
    plain number (``-1``, ``-inf``), are left alone."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_row(cells: list[Any]) -> list[Any]:
    return [csv_cell(cell) for cell in cells]


def printable(text: object) -> str:
    """``text`` for one log line: control and direction-changing characters shown as escapes
    (``\\n``, ``\\x1b``, ``\\u202e``), the rest unchanged."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def script_literal(value: Any) -> str:
    """``value`` as a JavaScript literal safe inside ``<script>``: JSON (NaN and Infinity allowed) with
    ``<``, ``>``, ``&`` and the JavaScript line separators written as ``\\u`` escapes, so no text in it can
    close the script or open a comment."""
    text = json.dumps(value, allow_nan=True)
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group()], text)
