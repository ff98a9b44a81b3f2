"""``msprobe -f pytorch run_ut -config cfg.json`` with ``run_ut.is_online: true``: the receiver.

Listens where the ``run_ut`` section says (``host``/``port`` with ``tls_path``, or ``nfs_path``),
replays what the ``rank_list`` ranks send with run_ut's engine in worker processes, writes the reports
per step and rank under ``-o`` and exits when every rank has stopped (docs/run_ut_online.md). ``-d``: locally
every worker replays on its first device; on Ray, as multi_run_ut's parts, each actor holds one device of
``-d``'s kind that Ray assigns it, among the ids ``-d`` names (docs/scale.md).

Exit codes as ``run_ut``: 0 at least one API judged, 1 none, 2 bad input (a config, TLS file or
setting that cannot work, a port in use); SIGINT/SIGTERM end the run early with the summary.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

from msprobe.core.engine import EngineChoice
from msprobe.core.services.log import logger
from msprobe.core.online.receiver import Intake, Receiver, ReplayPool
from msprobe.core.online.settings import SettingError, online_settings
from msprobe.core.online.tcp import DirWatcher, TcpServer, tls_context
from msprobe.core.online.wire import Limits


def receive_if_online(config_path: str, out_path: str, devices: str | Sequence[str],
                      engine: EngineChoice | None = None) -> int | None:
    """The receiver's exit code when the config's ``run_ut`` section has ``is_online: true``, else None;
    ``devices``: ``-d`` (one name, or all of them); ``engine``: where the replays run (local processes, or Ray
    actors: docs/scale.md)."""
    from msprobe.core.config import load_config
    from msprobe.core.tasks.builtin import load_builtin_tasks
    from msprobe.pytorch.run_ut.replay import load_run_ut_section

    load_builtin_tasks()
    section = load_config(config_path, framework="pytorch", task="run_ut").section
    if not section.is_online:
        return None
    lists = load_run_ut_section(config_path)  # the white/black lists, checked against the API table
    return receive(section, out_path, devices, lists.white_list, lists.black_list, engine)


def receive(section: Any, out_path: str, devices: str | Sequence[str] = "cpu", white_list: tuple[str, ...] = (),
            black_list: tuple[str, ...] = (), engine: EngineChoice | None = None) -> int:
    """Run the receiver of a ``run_ut`` section (``is_online`` true) until every rank stopped. An engine that
    cannot run the replays — Ray unreachable, an actor given a device ``-d`` does not offer or one its node cannot
    open — raises :class:`~msprobe.core.engine.EngineError` (the command's exit code 2)."""
    from msprobe.core.run_ut.parallel import offered
    from msprobe.pytorch.online.replay import replay_frames, warm_up
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import check_device

    devices = [devices] if isinstance(devices, str) else list(devices)
    try:
        settings = online_settings()
        offer = offered(devices, engine)
        if offer is None:  # else each actor's node checks the device Ray gave it
            check_device(devices[0])
        limits = Limits.from_megabytes(settings.max_message_mb)
        context = None if section.nfs_path else tls_context(section.tls_path, section.host, server=True,
                                                             field="run_ut.tls_path")
    except (SettingError, RunUtError, ValueError) as exc:
        logger.error("run_ut online: %s", exc)
        return 2
    workers = settings.workers or os.cpu_count() or 1
    replay = functools.partial(replay_frames, max_message_mb=settings.max_message_mb, white_list=white_list,
                               black_list=black_list, **({"device": devices[0]} if offer is None else {}))
    pool = ReplayPool(workers, replay, initializer=warm_up, engine=engine, accelerators=offer)
    intake = Intake(section.rank_list, pool.submit)
    try:
        if section.nfs_path:
            transport: Any = DirWatcher(section.nfs_path, limits, intake)
            where = f"shared directory {section.nfs_path}"
        else:
            transport = TcpServer(section.host, section.port, context, limits, intake)
            where = f"{section.host}:{transport.port} ({'TLS' if context else 'plain TCP, loopback'})"
    except (OSError, ValueError) as exc:
        pool.close()
        logger.error("run_ut online: cannot listen: %s", exc)
        return 2
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers: main thread only
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    logger.info("run_ut online: receiving ranks %s on %s, %s, reports under %s", sorted(section.rank_list), where,
                f"{workers} replay processes" if offer is None else f"up to {workers} Ray actors, one "
                f"{offer.kind} device each", out_path)
    info = {"device": devices[0]} if offer is None else {"device": offer.kind, "devices": devices}
    receiver = Receiver(out_path, intake, pool, {**info, "mode": "online", "source": where})
    try:
        summary = receiver.run(stop.is_set)
    finally:
        transport.close()
        pool.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    logger.info("run_ut online: %d records, %d replayed, %d APIs judged, %d malformed skipped, dropped by the "
                "senders %s; summary in %s", summary["records"], summary["replayed"], summary["checked"],
                summary["malformed"], summary["dropped_by_senders"] or 0, os.path.join(out_path,
                                                                                     "online_summary.json"))
    if stop.is_set():
        logger.warning("run_ut online: interrupted before every rank stopped (stopped: %s)",
                       summary["stopped_ranks"])
    return 0 if receiver.checked else 1
