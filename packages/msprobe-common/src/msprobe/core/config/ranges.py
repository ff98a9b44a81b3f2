"""``rank`` and ``step`` lists: plain indices and inclusive range strings such as ``"4-6"``.

msprobe 1.1.1 silently dropped a plain numeric string like ``"5"``; we accept it as 5, and every
other malformed element is reported with its position instead of being skipped.
"""

from __future__ import annotations

import re

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.config.model import DebuggerConfig
from msprobe.core.services.log import logger

# Guards against a typo such as "0-100000000" turning into a hundred-million-element tuple.
MAX_INDEX = 1_000_000
_RANGE = re.compile(r" *([0-9]+) *- *([0-9]+) *")
_NUMBER = re.compile(r" *([0-9]+) *")
_ALLOWED = (
    f'an integer 0..{MAX_INDEX}, a range string "a-b" with a <= b (inclusive), or a numeric string like "5"'
)
_LIST_ALLOWED = 'a list of integers >= 0 and range strings like "4-6"'


def _element_indices(element: object) -> range | None:
    """The indices one list element stands for, or ``None`` when it is malformed."""
    if isinstance(element, int) and not isinstance(element, bool):
        low = high = element
    elif isinstance(element, str) and (match := _NUMBER.fullmatch(element) or _RANGE.fullmatch(element)):
        low, high = int(match.group(1)), int(match.group(match.lastindex or 1))
    else:
        return None
    if not 0 <= low <= high <= MAX_INDEX:
        return None
    return range(low, high + 1)


def parse_indices(values: object, path: str, suffix: str = "") -> tuple[tuple[int, ...], list[Problem]]:
    """Expand ``values`` into sorted unique indices, collecting one problem per bad element.

    ``path`` names the list (``"rank"``); element problems are named ``rank[2]`` + ``suffix``.
    """
    if not isinstance(values, (list, tuple)):
        return (), [Problem(f"{path}{suffix}", values, _LIST_ALLOWED)]
    indices: set[int] = set()
    problems: list[Problem] = []
    for position, element in enumerate(values):
        expanded = _element_indices(element)
        if expanded is None:
            problems.append(Problem(f"{path}[{position}]{suffix}", element, _ALLOWED))
        else:
            indices.update(expanded)
    return tuple(sorted(indices)), problems


def expand_ranges(values: object, key: str) -> tuple[int, ...]:
    """``[0, "2-4", "7"]`` → ``(0, 2, 3, 4, 7)``; any malformed element raises :class:`ConfigError`."""
    indices, problems = parse_indices(values, key)
    if problems:
        raise ConfigError(problems)
    return indices


def warn_unknown_ranks(config: DebuggerConfig, world_size: int) -> None:
    """Warn about configured ranks that this run does not have (nothing is collected for them).

    Called by the debugger once the world size is known, i.e. after the process group exists.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size: got {world_size!r}; allowed: an integer >= 1")
    missing = [rank for rank in config.rank if rank >= world_size]
    if not missing:
        return
    consequence = "nothing will be collected" if len(missing) == len(config.rank) else "they will be skipped"
    logger.warning(
        "config rank %s: rank(s) %s do not exist in this run (world size %d, ranks 0..%d); %s",
        list(config.rank),
        missing,
        world_size,
        world_size - 1,
        consequence,
    )
