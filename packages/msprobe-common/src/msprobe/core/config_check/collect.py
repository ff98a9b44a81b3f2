"""What ``ConfigChecker`` does in a training script, framework-free (docs/config_check.md#in-the-training-script).

A framework half gives a :class:`FrameworkProbe` (how to read its facts, seeds, weights and batches, and
which random APIs to track); :class:`PackCollector` builds the pack's sections from it, hooks the model's
forward to checksum the first ``data_steps`` batches, and rewrites the pack (atomically) after each of them
and when the process exits.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from msprobe.core.config_check import environment, hyperparams
from msprobe.core.config_check.pack import write_pack
from msprobe.core.config_check.randomness import RandomCalls, track_python_and_numpy
from msprobe.core.services.log import logger
from msprobe.core.services.tree import tensors_in


class FrameworkProbe(Protocol):
    name: str  # "pytorch", "mindspore"

    def facts(self) -> dict[str, Any]: ...  # the framework section: versions, determinism, precision, threads

    def seeds(self) -> dict[str, Any]: ...  # the generators' seeds now

    def track_random(self, calls: RandomCalls) -> None: ...  # wrap the framework's random APIs

    def is_tensor(self, value: Any) -> bool: ...

    def describe(self, tensor: Any) -> str: ...  # "dtype shape checksum" of one tensor (reads it: a host sync)

    def named_tensors(self, model: Any) -> Any: ...  # (name, tensor) of every parameter and buffer

    def before_forward(self, model: Any, call: Callable[[tuple, dict], None]) -> Any: ...  # a removable hook

    def rank(self) -> int | None: ...


class AdapterProbe:
    """The part of a :class:`FrameworkProbe` its framework's tensor adapter answers: what a tensor is, and
    its "dtype shape checksum" (the checksum of ``summary_mode: md5``)."""

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter

    def is_tensor(self, value: Any) -> bool:
        return self._adapter.is_tensor(value)

    def describe(self, tensor: Any) -> str:
        return f"{tensor.dtype} {list(tensor.shape)} {self._adapter.checksum(tensor)}"


_CALLS = RandomCalls()
_TRACKING: set[str] = set()
_TRACKING_LOCK = threading.Lock()


def track_random_calls(probe: FrameworkProbe) -> RandomCalls:
    """Start tracking (once per process and framework) the random APIs of Python, numpy and the framework."""
    with _TRACKING_LOCK:
        if not _TRACKING:
            track_python_and_numpy(_CALLS)
        if probe.name not in _TRACKING:
            probe.track_random(_CALLS)
            _TRACKING.add(probe.name)
    return _CALLS


def weights(probe: FrameworkProbe, model: Any) -> dict[str, str]:
    """Every parameter and buffer of ``model``: name → "dtype shape checksum"."""
    return {name: probe.describe(tensor) for name, tensor in probe.named_tensors(model)}


def batch(probe: FrameworkProbe, args: tuple, kwargs: dict) -> dict[str, str]:
    """The tensors of one forward call's inputs, in argument order: ``tensor{i}`` → "dtype shape checksum"."""
    return {f"tensor{i}": probe.describe(t) for i, t in enumerate(tensors_in((args, kwargs), probe.is_tensor))}


def pack_path(output_zip_path: str | os.PathLike, rank: int | None) -> Path:
    """Rank 0 (or a process outside a distributed job) writes ``output_zip_path``; rank R ``<stem>_rankR.zip``."""
    path = Path(output_zip_path)
    return path if not rank else path.with_name(f"{path.stem}_rank{rank}{path.suffix}")


def check_arguments(output_zip_path: Any, shell_path: Any, data_steps: Any) -> list[str]:
    """Every problem with the arguments, each naming the argument, its value and what is allowed."""
    problems = []
    if not isinstance(output_zip_path, (str, os.PathLike)) or not str(output_zip_path).endswith(".zip"):
        problems.append(f"output_zip_path {output_zip_path!r} must be a path ending in .zip")
    for script in shell_path or ():
        if not Path(script).is_file():
            problems.append(f"shell_path {str(script)!r} is not a file; allowed: launch scripts that exist")
    if isinstance(data_steps, bool) or not isinstance(data_steps, int) or data_steps < 0:
        problems.append(f"data_steps {data_steps!r} must be an integer >= 0")
    return problems


def hyperparameters(argv: Sequence[str], scripts: Sequence[str | os.PathLike]) -> dict[str, str]:
    """Flags of the scripts, then of this process's own command line (which wins)."""
    found: dict[str, str] = {}
    for script in scripts:
        found.update(hyperparams.from_script(script))
    found.update(hyperparams.parse_flags(list(argv)))
    return found


def static_sections(probe: FrameworkProbe | None, scripts: Sequence[str | os.PathLike], argv: Sequence[str],
                    env_pattern: str | None) -> dict[str, dict]:
    """The sections known at once: environment, packages, framework facts, hyperparameters."""
    sections = {
        "environment": environment.environment(pattern=environment.check_pattern(env_pattern)),
        "packages": environment.packages(),
        "hyperparameters": hyperparameters(argv, scripts),
    }
    if probe is not None:
        sections["framework"] = probe.facts()
    return sections


class PackCollector:
    """One process's pack, kept up to date while training runs."""

    def __init__(self, probe: FrameworkProbe, output_zip_path: str | os.PathLike, model: Any = None,
                 shell_path: Sequence[str | os.PathLike] | None = None, data_steps: int = 5,
                 env_pattern: str | None = None) -> None:
        scripts = [shell_path] if isinstance(shell_path, (str, os.PathLike)) else list(shell_path or ())
        problems = check_arguments(output_zip_path, scripts, data_steps)
        if problems:
            raise ValueError("; ".join(problems))
        self.probe = probe
        self.path = pack_path(output_zip_path, probe.rank())
        self.calls = track_random_calls(probe)
        self.sections = static_sections(probe, scripts, sys.argv[1:], env_pattern)
        self.sections["weights"] = weights(probe, model) if model is not None else {}
        self.sections["data"] = {}
        self._data_steps = data_steps
        self._lock = threading.Lock()
        self._hook = probe.before_forward(model, self._on_batch) if model is not None and data_steps else None
        self.save()
        atexit.register(self.save)
        logger.info(f"config_check: pack {self.path}")

    def _on_batch(self, args: tuple, kwargs: dict) -> None:
        with self._lock:
            step = len(self.sections["data"])
            if step >= self._data_steps:
                return
            self.sections["data"][f"step{step}"] = batch(self.probe, args, kwargs)
        if step + 1 == self._data_steps and self._hook is not None:
            self._hook.remove()
        self.save()

    def save(self) -> Path:
        """Write the pack as it is now (the random calls and seeds so far); atomic."""
        with self._lock:
            self.sections["random"] = {"calls": self.calls.snapshot(), "seeds": self.probe.seeds()}
            return write_pack(self.path, self.probe.name, self.sections)


class ConfigCheckerBase:
    """Pack this run for ``msprobe config_check -c`` (docs/config_check.md#in-the-training-script); a framework
    package's ``ConfigChecker`` sets ``probe_class``.

    Construct it once the model exists, before training: it packs the environment, packages, the
    framework's facts, the hyperparameters of this process's command line (and of ``shell_path`` scripts)
    and a checksum of every weight, then a checksum of each input batch of ``model``'s first
    ``data_steps`` forward calls, the random calls and the seed, rewriting ``output_zip_path`` after each
    batch and at exit.
    """

    probe_class: type = type(None)

    def __init__(self, model: Any = None, shell_path: str | Sequence[str] | None = None,
                 output_zip_path: str | os.PathLike = "./config_check_pack.zip", data_steps: int = 5,
                 env_pattern: str | None = None) -> None:
        self._collector = PackCollector(self.probe_class(), output_zip_path, model, shell_path, data_steps,
                                        env_pattern)
        self.path = self._collector.path

    @classmethod
    def apply_patches(cls) -> None:
        """Start tracking random calls now, before the model is built (its initialisation draws too)."""
        track_random_calls(cls.probe_class())

    def save(self) -> Path:
        """Write the pack now (it is also written after each packed batch and at exit)."""
        return self._collector.save()
