"""Warnings for keys msprobe does not use: typos (with the closest known key) and retired keys.

An unknown key is a warning rather than an error so that a config written for a newer or older
msprobe still loads; the suggestion catches the typo that would otherwise silently fall back to
a default (``"summary_mod": "md5"`` dumping statistics only).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import fields

from msprobe.core.services.log import logger
from msprobe.core.tasks.registry import task_named, task_names

COMMON_KEYS = ("task", "dump_path", "rank", "step", "level", "enable_dataloader", "dump_enable", "risk_level",
               "low_risk_apis", "dump_format", "custom_op_namespaces", "load")
# Keys of msprobe 1.0.x that 1.1.1 removed; old configs still carry them.
RETIRED_COMMON_KEYS = ("acl_config", "seed", "is_deterministic")
RETIRED_SECTION_KEYS = {"tensor": ("backward_input",)}


def json_keys(section_class: type) -> tuple[str, ...]:
    """The JSON keys of a section, in declaration order (attribute ``api_list`` is JSON ``list``, ``slices``
    is ``slice``: names that would hide Python's own)."""
    return tuple(_JSON_KEYS.get(field.name, field.name) for field in fields(section_class))


_JSON_KEYS = {"api_list": "list", "slices": "slice"}


def _warn_unknown(key: str, path: str, known: Iterable[str]) -> None:
    known = tuple(known)
    nearest = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {nearest[0]!r}?" if nearest else "known keys here: " + ", ".join(known)
    logger.warning("config key %r is not known to msprobe and is ignored; %s", path, hint)


def _warn_retired(path: str) -> None:
    logger.warning("config key %r is no longer used since msprobe 1.1.1 and is ignored", path)


def warn_unused_keys(raw: Mapping[str, object], task: str) -> None:
    """Warn about every unknown or retired key, at the top level and inside each task section.

    The section of ``task`` is validated elsewhere; another task's section that is not an object
    is only worth a warning, since it is not read.
    """
    tasks = task_names()
    for key, value in raw.items():
        if key in RETIRED_COMMON_KEYS:
            _warn_retired(key)
        elif key not in COMMON_KEYS and key not in tasks:
            _warn_unknown(key, key, COMMON_KEYS + tasks)
        elif key in tasks and key != task and value is not None and not isinstance(value, Mapping):
            logger.warning("config key %r should be an object {...}; ignored (task is %r)", key, task)
        elif key in tasks and isinstance(value, Mapping):
            known = json_keys(task_named(key).section)
            retired = RETIRED_SECTION_KEYS.get(key, ())
            for section_key in value:
                path = f"{key}.{section_key}"
                if section_key in retired:
                    _warn_retired(path)
                elif section_key not in known:
                    _warn_unknown(section_key, path, known)
