"""The Ray engine: work units as Ray tasks on a cluster (``msprobe-common[ray]``; docs/scale.md).

A task gets a batch of units (their paths and names) and returns their results; Ray re-runs a task whose
worker died (``RETRIES``), which is why units must be idempotent. A stream of calls (the online receiver)
goes to a pool of actors instead (:class:`ActorExecutor`). A unit or an actor that replays on an accelerator
asks Ray for one (``num_gpus=1``, or Ray's ``NPU`` resource) and runs on the device Ray assigned it
(:func:`assigned_device`). Only this module imports Ray, and only when ``--engine ray`` is chosen.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from typing import Any

from msprobe.core.engine import ACCELERATORS, VISIBILITY, Accelerators, EngineError, WorkerLost, batch_size
from msprobe.core.services.log import logger

RETRIES = 3  # re-runs of a task whose worker process died (Ray's own default for tasks)
PROBE_TIMEOUT_S = 10  # an address that accepts no TCP connection by then is unreachable


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise EngineError("--engine ray needs Ray: pip install 'msprobe-common[ray]'") from None
    return ray


def _probe(address: str) -> None:
    """Fail in seconds on an address nobody listens on (Ray itself retries a missing head for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise EngineError(f"ray_address (--ray-address) is {address!r}; allowed: host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise EngineError(f"the Ray cluster at {address!r} cannot be reached: {exc}") from None


@contextmanager
def connected(address: str | None, offer: Accelerators | None = None) -> Iterator[RayEngine]:
    """A :class:`RayEngine` on the cluster at ``address`` (None: a Ray started here, shut down after, offering
    exactly ``offer``'s devices when it names them)."""
    ray = _import_ray()
    if ray.is_initialized():
        yield RayEngine(ray)
        return
    if address not in (None, "auto"):
        _probe(address)
    try:
        with _declared(offer if address is None else None) as devices:
            ray.init(address=address or "local", include_dashboard=False, logging_level="WARNING", **devices)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # Ray's own text runs to many lines
        raise EngineError(f"the Ray cluster at {address or 'local'!r} cannot be joined: {reason}") from None
    logger.info("engine ray: %s CPUs at %s", ray.cluster_resources().get("CPU", 0), address or "a local Ray")
    try:
        yield RayEngine(ray)
    finally:
        ray.shutdown()


@contextmanager
def _declared(offer: Accelerators | None) -> Iterator[dict[str, Any]]:
    """The ``ray.init`` arguments of a Ray started here that offers ``offer``'s ids: Ray numbers a node's devices
    by the visibility variable of the process that starts it (set for the start only) and hands out that many."""
    if offer is None or not offer.ids:
        yield {}  # Ray finds the machine's devices itself
        return
    variable = VISIBILITY[offer.kind]
    before = os.environ.get(variable)
    os.environ[variable] = ",".join(offer.ids)
    try:
        yield _devices(offer.kind, len(offer.ids))
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before


def _devices(kind: str, count: int) -> dict[str, Any]:
    """Ray's options for ``count`` devices of ``kind`` (``cuda``: its GPUs; ``npu``: the Ascend resource)."""
    return {"num_gpus": count} if kind == "cuda" else {"resources": {ACCELERATORS[kind]: count}}


def assigned_device(offer: Accelerators) -> tuple[str, str]:
    """In a task holding one accelerator: the device Ray assigned it, named as this process numbers it (``cuda:0``:
    Ray made it the only visible one), and where it is (``cuda device 5 of node 10.0.0.3``, for messages);
    :class:`EngineError` when it is not one of ``offer``'s ids."""
    ray = _import_ray()
    ids = ray.get_runtime_context().get_accelerator_ids().get(ACCELERATORS[offer.kind], [])
    node = ray.util.get_node_ip_address()
    if len(ids) != 1 or (offer.ids and ids[0] not in offer.ids):
        raise EngineError(f"Ray gave a unit {offer.kind} device(s) {ids} on node {node}, but -d offers "
                          f"{', '.join(offer.ids) or 'one device'}: start each node's Ray with only the devices the "
                          f"job may use ({VISIBILITY[offer.kind]}=... ray start ...)")
    name = device_name(offer.kind, ids[0], os.environ.get(VISIBILITY[offer.kind]))
    return name, f"{offer.kind} device {ids[0]} of node {node}"


def device_name(kind: str, device_id: str, visible: str | None) -> str:
    """Device ``device_id`` of the node as a process numbers it: its position among the ids its visibility
    variable lists (Ray lists only the assigned one: position 0), or the id itself when the variable is unset."""
    listed = [part.strip() for part in visible.split(",")] if visible else None
    if listed is not None and device_id not in listed:
        raise EngineError(f"{kind} device {device_id} is not visible to this process ({visible!r})")
    return f"{kind}:{listed.index(device_id) if listed is not None else device_id}"


def _run_batch(fn: Callable[[Any], Any], batch: Sequence[Any]) -> list[Any]:
    return [fn(item) for item in batch]


class RayEngine:
    """Batches of units as Ray tasks, one CPU each (and one accelerator when asked), scheduled wherever the
    cluster has them."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._task = ray.remote(num_cpus=1, max_retries=RETRIES)(_run_batch)
        self._isolated = ray.remote(num_cpus=1, max_retries=RETRIES, max_calls=1)(_run_batch)  # a fresh process

    def executor(self, max_workers: int, initializer: Callable[..., None] | None = None,
                 accelerators: Accelerators | None = None) -> Executor:
        """An executor of calls on at most ``max_workers`` actors (:class:`ActorExecutor`)."""
        return ActorExecutor(self._ray, max_workers, initializer, accelerators)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], workers: int, *, chunksize: int | None = None,
            isolated: bool = False, serial_below: int = 0, accelerator: str | None = None) -> Iterator[Any]:
        size = chunksize or batch_size(len(items), int(self._ray.cluster_resources().get("CPU", 1)))
        task = self._isolated if isolated else self._task
        if accelerator is not None:
            task = task.options(**_devices(accelerator, 1))
        fn_ref = self._ray.put(fn)
        refs = [task.remote(fn_ref, items[start:start + size]) for start in range(0, len(items), size)]
        return self._gather(refs)

    def _gather(self, refs: list) -> Iterator[Any]:
        """The batches' results in order. A caller that stops early (a unit's error) leaves the other batches to
        run to their end: ``ray.cancel`` of a batch finishing at that moment makes Ray abort the process that sent
        it (its check "Tried to complete task that was not pending"; docs/scale.md, Decisions)."""
        from ray.exceptions import NodeDiedError, RayTaskError, WorkerCrashedError

        try:
            for ref in refs:
                yield from self._ray.get(ref)
        except RayTaskError as exc:  # a unit's own error: raised as the local engine raises it
            if isinstance(exc.cause, BaseException):
                raise exc.cause from None
            raise
        except (WorkerCrashedError, NodeDiedError) as exc:
            raise WorkerLost(f"a Ray worker died {RETRIES + 1} times running the same units: {exc}") from None


class _Checker:
    """A Ray actor that runs calls one at a time, after ``initializer`` (e.g. a replay's warm-up) ran once. Holding an
    accelerator (``offer``), it runs on the device Ray assigned it: the initializer and every call get
    ``device=`` its name in this process (``cuda:0``). A worker that cannot start — a device ``-d`` does not offer,
    an initializer that fails — refuses every call with that reason (:class:`EngineError`), which ends the job."""

    def __init__(self, initializer: Callable[..., None] | None, offer: Accelerators | None) -> None:
        self._placed: dict[str, str] = {}
        self._refusal: EngineError | None = None
        where = f"node {_import_ray().util.get_node_ip_address()}"
        try:
            if offer is not None:
                device, where = assigned_device(offer)
                self._placed, where = {"device": device}, f"{where} ({device} in the worker)"
            if initializer is not None:
                initializer(**self._placed)
        except EngineError as exc:
            self._refusal = exc
        except Exception as exc:
            self._refusal = EngineError(f"a worker on {where} cannot start: {exc}")

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._refusal is not None:
            raise self._refusal
        return fn(*args, **self._placed)


def _own_outcome(future: Future) -> Future:
    """``future`` with a call's own error in place of Ray's wrapper of it, as the local engine's futures raise."""
    from ray.exceptions import RayTaskError

    own: Future = Future()

    def copy(done: Future) -> None:
        error = done.exception()
        if error is None:
            own.set_result(done.result())
        else:
            cause = error.cause if isinstance(error, RayTaskError) else None
            own.set_exception(cause if isinstance(cause, BaseException) else error)

    future.add_done_callback(copy)
    return own


class ActorExecutor(Executor):
    """An executor over Ray actors for a stream of calls (the online receiver's replays): it starts one actor
    now and adds one whenever every actor is busy, up to ``max_actors``; a call goes to the least busy actor.
    With ``accelerators``, each actor holds one device of their kind (:class:`_Checker`). Ray restarts an actor
    that died and re-runs its calls (``RETRIES``)."""

    def __init__(self, ray: Any, max_actors: int, initializer: Callable[..., None] | None = None,
                 accelerators: Accelerators | None = None) -> None:
        self._ray, self._max, self._initializer = ray, max(1, max_actors), initializer
        self._offer = accelerators
        checker = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(_Checker)
        self._class = checker.options(**_devices(accelerators.kind, 1)) if accelerators else checker
        self._busy: dict[Any, int] = {self._start(): 0}  # actor → calls in flight; the first starts now
        self._lock = threading.Lock()

    def _start(self) -> Any:
        return self._class.remote(self._initializer, self._offer)

    @property
    def actors(self) -> int:
        with self._lock:
            return len(self._busy)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        with self._lock:
            actor = min(self._busy, key=self._busy.__getitem__) if self._busy else None
            if actor is None or (self._busy[actor] and len(self._busy) < self._max):
                actor = self._start()
                self._busy[actor] = 0
            self._busy[actor] += 1
        future = actor.call.remote(functools.partial(fn, **kwargs) if kwargs else fn, *args).future()
        future.add_done_callback(lambda _: self._done(actor))
        return _own_outcome(future)

    def _done(self, actor: Any) -> None:
        with self._lock:
            if actor in self._busy:
                self._busy[actor] -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            actors, self._busy = list(self._busy), {}
        for actor in actors:
            if wait and not cancel_futures:
                self._ray.get(actor.__ray_ready__.remote())  # queued after its calls: they are done
            self._ray.kill(actor)
