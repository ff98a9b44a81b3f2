"""Typed reads of raw JSON values that record problems instead of raising.

A :class:`FieldReader` reads one JSON object (the common keys, one task section, or the
constructor arguments). Each read returns a usable value — the default when the key is absent
(JSON ``null`` counts as absent) or invalid — so that checking can go on and report every
mistake at once; ``invalid`` remembers which keys were bad so cross-field rules can skip them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from msprobe.core.config.errors import Problem
from msprobe.core.config.ranges import parse_indices

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_int(value: object) -> bool:
    """JSON integers only: ``true`` is not 1 and ``5.0`` is not 5."""
    return isinstance(value, int) and not isinstance(value, bool)


def one_of(choices: tuple[str, ...]) -> str:
    return "one of " + ", ".join(repr(choice) for choice in choices)


class FieldReader:
    """Reads keys of ``raw``; problems are named ``{prefix}{key}{suffix}``, e.g. ``tensor.port``."""

    def __init__(self, raw: Mapping[str, object], prefix: str = "", suffix: str = "") -> None:
        self.raw = raw
        self.prefix = prefix
        self.suffix = suffix
        self.problems: list[Problem] = []
        self.invalid: set[str] = set()

    def path(self, key: str, index: int | None = None) -> str:
        position = "" if index is None else f"[{index}]"
        return f"{self.prefix}{key}{position}{self.suffix}"

    def given(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def report(self, key: str, value: object, allowed: str, index: int | None = None) -> None:
        self.problems.append(Problem(self.path(key, index), value, allowed))
        self.invalid.add(key)

    def checked(self, key: str, default, accept: Callable[[object], bool], allowed: str):
        """``key``'s value when ``accept`` takes it; else ``default``, with the problem reported as ``allowed``
        (absent or ``null``: ``default``, no problem). The typed reads below are this rule with a fixed test."""
        value = self.raw.get(key)
        if value is None:
            return default
        if not accept(value):
            self.report(key, value, allowed)
            return default
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        return self.checked(key, default, lambda v: isinstance(v, str) and v in choices, one_of(choices))

    def flag(self, key: str, default: bool) -> bool:
        return self.checked(key, default, lambda v: isinstance(v, bool), "true or false (a JSON boolean)")

    def optional_flag(self, key: str) -> bool | None:
        """A JSON boolean where absence means ``None`` (not given is not the same as ``false``)."""
        return self.checked(key, None, lambda v: isinstance(v, bool), "true or false (a JSON boolean)")

    def integer(self, key: str, default: int, accept: Callable[[int], bool], allowed: str) -> int:
        return self.checked(key, default, lambda v: is_int(v) and accept(v), allowed)

    def text(self, key: str, default: str, *, non_empty: bool = False) -> str:
        if non_empty:
            return self.checked(
                key, default, lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"
            )
        return self.checked(key, default, lambda v: isinstance(v, str), "a string")

    def optional_text(self, key: str) -> str | None:
        """A string where ``""`` (what 1.1.1's examples write for "not set") means ``None``."""
        return self.text(key, "") or None

    def port(self, key: str) -> int | None:
        """A TCP port 1..65535; -1 (1.1.1's "not set") and absence mean ``None``."""
        port = self.integer(
            key, -1, lambda v: v == -1 or 1 <= v <= 65535, "an integer 1..65535 (or -1: not set)"
        )
        return None if port == -1 else port

    def names(self, key: str) -> tuple[str, ...]:
        """A list of strings, e.g. API names; a bad element is reported by its position."""
        value = self.raw.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.report(key, value, "a list of strings")
            return ()
        for index, element in enumerate(value):
            if not isinstance(element, str) or not element.strip():
                self.report(key, element, "a non-empty string", index)
        return tuple(value) if key not in self.invalid else ()

    def indices(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self.raw.get(key)
        if value is None:
            return default
        indices, problems = parse_indices(value, self.prefix + key, self.suffix)
        if problems:
            self.problems.extend(problems)
            self.invalid.add(key)
            return default
        return indices

    def increasing_numbers(self, key: str, default: tuple[float, ...]) -> tuple[float, ...]:
        """A non-empty list of finite numbers within the int64 range, strictly increasing."""
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, list) or not value:
            self.report(key, value, "a non-empty list of numbers")
            return default
        previous = -math.inf
        for index, element in enumerate(value):
            if isinstance(element, bool) or not isinstance(element, (int, float)):
                self.report(key, element, "a number", index)
            elif not (math.isfinite(element) and INT64_MIN <= element <= INT64_MAX):
                self.report(
                    key, element, f"a finite number within the int64 range [{INT64_MIN}, {INT64_MAX}]", index
                )
            elif element <= previous:
                self.report(key, element, f"a number greater than the previous element {previous!r}", index)
            else:
                previous = element
        return default if key in self.invalid else tuple(float(element) for element in value)
