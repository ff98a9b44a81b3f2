"""What a failed configuration check hands back to the user.

Every check appends a :class:`Problem` instead of raising, so that one run of the loader can
report every mistake in a config file at once; :class:`ConfigError` then carries all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class _Missing:
    """Marks a required key that was not given (its repr reads well inside a message)."""

    def __repr__(self) -> str:
        return "nothing"


MISSING = _Missing()


@dataclass(frozen=True)
class Problem:
    """One invalid value: where it is (``statistics.data_mode[1]``), what it was, what is allowed."""

    path: str
    value: object
    allowed: str

    def __str__(self) -> str:
        return f"{self.path}: got {self.value!r}; allowed: {self.allowed}"


class ConfigError(ValueError):
    """The configuration cannot be used; ``problems`` lists every reason found.

    A file that cannot be read or parsed at all has no problems, only a ``detail`` that says why.
    """

    def __init__(
        self, problems: Iterable[Problem] = (), *, file: str | None = None, detail: str | None = None
    ) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.file = file
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        source = f"config file {self.file}" if self.file else "msprobe configuration"
        if self.detail is not None:
            return f"{source}: {self.detail}"
        count = len(self.problems)
        header = f"invalid {source} ({count} problem{'s' if count != 1 else ''}):"
        return "\n".join([header, *(f"  {problem}" for problem in self.problems)])
