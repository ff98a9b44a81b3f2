"""Who drew random numbers, and who seeded: the call sites of random-number APIs (docs/config_check.md#random-calls).

Each tracked API is replaced by a wrapper that calls it unchanged (same arguments, same generator: the
run's numbers do not move) and counts the call under its **site**, the API and the innermost frame of the
user's code (``file name:line in function``). Two runs that draw the same numbers call the same APIs at the
same sites the same number of times; an extra unseeded call, a missing ``seed()`` or a seed of another
value shows as a site of one run only or a count (or seed argument) that differs. Seeding APIs also record
their arguments. Python's ``random`` and numpy's legacy ``np.random`` are tracked here; the framework
halves add their own APIs through :meth:`RandomCalls.track`.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import sysconfig
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from msprobe.core.services.handles import Handle, HandleGroup, patch_attributes

STACK_DEPTH = 6
PYTHON_APIS = ("random", "randint", "uniform", "choice", "choices", "shuffle", "sample", "gauss", "normalvariate")
NUMPY_APIS = ("rand", "randn", "randint", "random", "choice", "normal", "uniform", "shuffle", "permutation")
SEEDING = {"seed", "manual_seed", "manual_seed_all", "set_seed"}
# msprobe's own directories (the namespace package spans the three distributions), installed packages and
# the standard library: a site is the user's line that led to the draw (``nn.Linear(...)``, not nn.init)
_SKIPPED = tuple(os.path.join(os.path.abspath(p), "") for p in (
    *sys.modules["msprobe"].__path__, *{sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}))


def _user_frames(depth: int = STACK_DEPTH) -> list[str]:
    """Up to ``depth`` frames of the user's code that led to the call, innermost first."""
    frames = []
    frame = sys._getframe(3)  # past _user_frames, _note and the wrapper
    while frame is not None and len(frames) < depth:
        path = frame.f_code.co_filename
        if not path.startswith(_SKIPPED):
            frames.append(f"{os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return frames


def _describe(value: Any) -> str:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return repr(value)
    return type(value).__name__


class RandomCalls:
    """The call sites of the tracked APIs: ``site → {"api", "count", "stack", "seeds"}``; thread-safe."""

    def __init__(self) -> None:
        self.sites: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._handles = HandleGroup()
        self._tracked: set[tuple[int, str]] = set()

    def track(self, owner: Any, names: Sequence[str], label: str) -> None:
        """Wrap ``owner.<name>`` for each name ``owner`` has (once per owner and name)."""
        patches = []
        for name in names:
            original = getattr(owner, name, None)
            if original is None or (id(owner), name) in self._tracked:
                continue
            self._tracked.add((id(owner), name))
            patches.append((owner, name, self._wrapper(original, f"{label}.{name}", name in SEEDING)))
        self._handles.add(patch_attributes(patches))

    def _wrapper(self, original: Callable, api: str, seeding: bool) -> Callable:
        @functools.wraps(original)
        def tracked(*args: Any, **kwargs: Any) -> Any:
            self._note(api, seeding, args, kwargs)
            return original(*args, **kwargs)

        return tracked

    def _note(self, api: str, seeding: bool, args: tuple, kwargs: dict) -> None:
        frames = _user_frames()
        site = f"{api} @ {frames[0] if frames else '?'}"
        with self._lock:
            record = self.sites.setdefault(site, {"api": api, "count": 0, "stack": frames})
            record["count"] += 1
            if seeding:
                seeds = record.setdefault("seeds", [])
                seeds.append(", ".join([*map(_describe, args), *(f"{k}={_describe(v)}" for k, v in kwargs.items())]))

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return {site: dict(record) for site, record in self.sites.items()}

    def remove(self) -> None:
        self._handles.remove()
        self._tracked.clear()


def track_python_and_numpy(calls: RandomCalls) -> Handle:
    calls.track(random, (*PYTHON_APIS, "seed"), "random")
    calls.track(np.random, (*NUMPY_APIS, "seed"), "np.random")
    return Handle(calls.remove)
