"""A config's ``run_ut`` section as the replay commands read it: ``white_list`` / ``black_list`` checked
against the framework's API table, and ``error_data_path``.

The config loader checks the lists' types only (it knows no framework); the run_ut command of a
framework knows which API names exist and reads the section through :func:`read_run_ut_section` before
any work starts, so that a typo (``"lineer"``) is an error naming the list, the value and the nearest
known names, not a run that silently checks nothing.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from msprobe.core.config import load_config
from msprobe.core.run_ut.replay_common import RunUtError
from msprobe.core.tasks.builtin import load_builtin_tasks


@dataclass(frozen=True)
class RunUtSection:
    """What a replay takes from the ``run_ut`` section: the lists and ``error_data_path`` (``None`` when
    left at its default ``./``: the command's ``<-o>/error_data``)."""

    white_list: tuple[str, ...] = ()
    black_list: tuple[str, ...] = ()
    error_data_path: str | None = None


def read_run_ut_section(config_path: str | os.PathLike | None, framework: str,
                        known: Callable[[], Collection[str]]) -> RunUtSection:
    """The ``run_ut`` section of a config.json (``None``: defaults), its list names checked against
    ``known()`` (every name a list may hold). Raises ``ConfigError`` for a bad file and
    :class:`~msprobe.core.run_ut.replay_common.RunUtError` for a list name that is no API."""
    if config_path is None:
        return RunUtSection()
    load_builtin_tasks()  # the file's other sections are tasks too, not unknown keys
    section = load_config(config_path, framework=framework, task="run_ut").section
    names = known()
    try:
        check_api_names("white_list", section.white_list, names)
        check_api_names("black_list", section.black_list, names)
    except ApiListError as exc:
        raise RunUtError(f"config {str(config_path)!r}: {exc}") from None
    path = section.error_data_path
    return RunUtSection(tuple(section.white_list), tuple(section.black_list),
                        None if Path(path) == Path(".") else path)


def list_names(api_keys: Iterable[str], base: Callable[[str], str]) -> frozenset[str]:
    """Every name a white/black list may hold, from the API table's ``Prefix.api`` keys: ``api``,
    ``Prefix.api`` and the bare API (``base(api)``, e.g. ``linear``)."""
    names: set[str] = set()
    for key in api_keys:
        api = key.split(".", 1)[1]
        names.update((api, key, base(api)))
    return frozenset(names)


class ApiListError(ValueError):
    """A white_list/black_list name matches no API of the framework."""


def check_api_names(field: str, names: Iterable[str], known: Collection[str]) -> None:
    """Raise :class:`ApiListError` for every name of ``field`` not in ``known`` (all reported at once,
    each with up to three near misses)."""
    problems = []
    for name in names:
        if name in known:
            continue
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        problems.append(f"{name!r}{hint}")
    if problems:
        raise ApiListError(f"run_ut.{field}: not an API name known to the API table: {'; '.join(problems)} "
                           f"(allowed: an API such as 'linear', 'Functional.linear' or 'Tensor.add_')")
