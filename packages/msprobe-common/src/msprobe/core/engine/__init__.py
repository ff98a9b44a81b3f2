"""Where the heavy work units of msprobe run: ``local`` (this machine's process pools, the default) or ``ray``
(a Ray cluster, imported only when chosen; docs/scale.md).

A job (compare's rank pairs and tensor pairs, multi_run_ut's parts) hands an engine a module-level function
and the units' arguments — paths and names, never tensor data — and gets the results back in order; a
stream of calls (the online receiver's replays) goes to the engine's executor. Units
must be idempotent: Ray re-runs a unit whose worker died. The commands add ``--engine`` and
``--ray-address`` (:func:`add_engine_flags`) and open the engine once around the run (:func:`open_engine`);
code inside the run opens the same choice again, which joins the engine already open.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

ENGINES = ("local", "ray")
ADDRESS_ENV = "MSPROBE_RAY_ADDRESS"
ACCELERATORS = {"cuda": "GPU", "npu": "NPU"}  # a device kind → Ray's resource for one device of it
VISIBILITY = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}  # what Ray sets for a task


class EngineError(RuntimeError):
    """The chosen engine cannot run the job: Ray missing or unreachable, a bad choice (nothing was run)."""


class WorkerLost(EngineError):
    """A unit's worker process died (after the engine's retries): the job's results are incomplete."""


@dataclass(frozen=True)
class EngineChoice:
    """``--engine`` and ``--ray-address``; ``address`` None: ``MSPROBE_RAY_ADDRESS``, else a Ray started
    for the run and shut down after it."""

    name: str = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise EngineError(f"engine (--engine) is {self.name!r}; allowed: {', '.join(ENGINES)}")
        if self.address is not None and self.name != "ray":
            raise EngineError(f"ray_address (--ray-address) is {self.address!r} but the engine is {self.name!r}; "
                              f"allowed only with --engine ray")


@dataclass(frozen=True)
class Accelerators:
    """Devices of one kind that units replay on, one device each (multi_run_ut's ``-d cuda:0 cuda:1`` on Ray):
    ``ids`` are the devices every node offers the job (empty: any device of the kind Ray gives)."""

    kind: str
    ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, devices: Sequence[str]) -> Accelerators | None:
        """``-d``'s device names (``cpu``, ``cuda:N``, ``npu:N``, ``cuda``) → their accelerators (None: the CPU);
        :class:`EngineError` for a mix of kinds, which one Ray resource per unit cannot express."""
        kinds = {name.partition(":")[0] for name in devices}
        ids = tuple(name.partition(":")[2] for name in devices)
        if kinds == {"cpu"}:
            return None
        if len(kinds) != 1 or not kinds <= set(ACCELERATORS) or not all(i.isdigit() for i in ids if i):
            raise EngineError(f"-d {' '.join(devices)} with --engine ray: give devices of one kind, cpu, cuda[:N] "
                              f"or npu[:N] (each unit asks Ray for one device of that kind)")
        return cls(kinds.pop(), () if "" in ids else ids)


class Engine(Protocol):
    """Runs ``fn(item)`` for every item and yields the results in the items' order."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], workers: int, *, chunksize: int | None = None,
            isolated: bool = False, serial_below: int = 0, accelerator: str | None = None) -> Iterator[Any]:
        """``workers``: this machine's processes (the local engine; Ray schedules on the cluster's CPUs);
        ``chunksize``: units per task (None: the engine sizes batches to its parallelism); ``isolated``: each
        task in a fresh process (torch and MindSpore do not survive ``fork``); ``serial_below``: fewer items
        than this run in the caller, where starting processes costs more than the work (local only);
        ``accelerator``: each task holds one device of this kind (``cuda``, ``npu``) that Ray assigns it and
        makes the only one the task sees (Ray only: on the local engine the caller places its units)."""
        ...

    def executor(self, max_workers: int, initializer: Callable[..., None] | None = None,
                 accelerators: Accelerators | None = None) -> Executor:
        """An executor for a stream of calls (the online receiver's replays), on at most ``max_workers``
        processes, each running ``initializer`` first; ``accelerators``: each process holds one device of their
        kind that Ray assigns it, and its initializer and calls get ``device=`` its name there (Ray only: on the
        local engine the caller places its calls)."""
        ...


def batch_size(items: int, parallelism: int) -> int:
    """Units per task: about eight tasks per worker (late workers balance the load), at most 64 units."""
    return max(1, min(64, items // (max(1, parallelism) * 8)))


@contextmanager
def open_engine(choice: EngineChoice | None = None, offer: Accelerators | None = None) -> Iterator[Engine]:
    """The engine of ``choice`` for the duration of the block; a Ray started here is shut down after it,
    one already connected (an outer block, a Ray worker, the user's own ``ray.init``) is joined and kept.
    ``offer``: the accelerators a Ray started here offers (exactly its ids); a cluster offers what each node's
    ``ray start`` declared."""
    choice = choice or EngineChoice()
    if choice.name == "local":
        from msprobe.core.engine.local import LocalEngine

        yield LocalEngine()
        return
    from msprobe.core.engine.ray_engine import connected

    address = choice.address if choice.address is not None else os.environ.get(ADDRESS_ENV)
    with connected(address, offer) as engine:
        yield engine


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """``--engine`` and ``--ray-address``, as every command that spreads work spells them."""
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="where the work units run: local processes (default) or a Ray cluster (docs/scale.md)")
    parser.add_argument("--ray-address", dest="ray_address", metavar="ADDRESS",
                        help=f"--engine ray: the cluster's address (host:port, or auto for the cluster this machine "
                             f"belongs to; default ${ADDRESS_ENV}, else a Ray started for this run)")


def choice_from_args(args: argparse.Namespace) -> EngineChoice:
    """The :class:`EngineChoice` of a command's parsed flags (:class:`EngineError` for a contradiction)."""
    return EngineChoice(getattr(args, "engine", "local"), getattr(args, "ray_address", None))
