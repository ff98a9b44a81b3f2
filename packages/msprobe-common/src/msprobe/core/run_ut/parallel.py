"""``multi_run_ut`` without a framework: split the selected APIs into parts, run each part in its own
process (local, or a Ray task: :mod:`msprobe.core.engine`), merge the parts' reports in order and gather
their error data.

A framework's ``multi_run_ut`` selects the APIs (its own reader, lists, ``-f``), then calls
:func:`run_parts` with a *part runner*: a picklable callable ``runner(part_dir, apis) -> (judged, error)``
that runs its ``run_ut`` on ``apis`` (row names, ``Functional.linear.0``) writing the three report files
into ``part_dir``, and returns how many APIs it judged and an error message (``None`` when fine); given
``devices``, the runner also gets the part's device, ``runner(part_dir, apis, device)``.
Processes are started with ``spawn``: torch and MindSpore do not survive ``fork`` (on Ray, each part in a
fresh worker process). A part starts from an empty folder, so a part that an engine re-runs after its
worker died writes its reports once.

Devices (docs/scale.md): on the local engine part K runs on ``devices[K mod count]``; on Ray a part that
replays on an accelerator asks Ray for one device of its kind and runs on the one Ray assigned, which must be
one of the ids ``devices`` names (the devices every node offers the job); CPU parts ask for a CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from msprobe.core.engine import Accelerators, EngineChoice, WorkerLost, add_engine_flags, open_engine
from msprobe.core.services.log import logger
from msprobe.core.run_ut.report import DEFAULT_DETAILS, DetailsLayout, merge_parts, report_dir

MAX_PARTS = 64
DEFAULT_PARTS = 8
PartRunner = Callable[..., tuple[int, "str | None"]]  # (part_dir, apis[, device]) → (APIs judged, error)


class PartError(RuntimeError):
    """A part failed (its own error, e.g. a missing tensor file, or its process died)."""


def parts_arg(text: str) -> int:
    """argparse type of ``-n``: an integer in 1..MAX_PARTS."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_PARTS:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..{MAX_PARTS}")
    return value


def add_parts_option(parser: argparse.ArgumentParser) -> None:
    """The ``-n/--num_splits``, ``--engine`` and ``--ray-address`` flags, as every framework's
    ``multi_run_ut`` spells them."""
    parser.add_argument("-n", "--num_splits", dest="parts", type=parts_arg, default=None,
                        help=f"number of parts, each run in its own process (1..{MAX_PARTS}; default "
                             f"{DEFAULT_PARTS}, at most the number of APIs and of CPUs)")
    add_engine_flags(parser)


def split_parts(items: Sequence[str], parts: int) -> list[list[str]]:
    """``items`` in ``parts`` contiguous, non-empty chunks whose sizes differ by at most one (fewer
    chunks when there are fewer items; one empty chunk when there are none)."""
    items = list(items)
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks


def plan_parts(items: Sequence[str], parts: int | None = None) -> list[list[str]]:
    """The chunks :func:`run_parts` runs: ``parts`` (default ``min(DEFAULT_PARTS, CPUs)``) split by
    :func:`split_parts` — for a caller that places each part (e.g. on its own device) beforehand."""
    return split_parts(items, parts if parts is not None else min(DEFAULT_PARTS, os.cpu_count() or 1))


def move_error_data(part_dirs: Sequence[Path], target: Path) -> None:
    """Move every part's ``error_data/<API>/`` folder to ``target/<API>/`` (replacing an older one)."""
    for d in part_dirs:
        source = Path(d) / "error_data"
        if not source.is_dir():
            continue
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(source.iterdir()):
            dest = target / item.name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.move(str(item), str(dest))


def _run_part(unit: tuple[PartRunner, str, list[str], str | Accelerators | None]) -> tuple[int, str | None]:
    """One part from an empty folder: what an earlier, killed run of it left there is removed first. Its
    placement: a device, the accelerator Ray assigned this task (:class:`Accelerators`), or none given."""
    runner, part_dir, apis, placement = unit
    shutil.rmtree(part_dir, ignore_errors=True)
    if placement is None:
        return runner(part_dir, apis)
    if not isinstance(placement, Accelerators):
        return runner(part_dir, apis, placement)
    from msprobe.core.engine.ray_engine import assigned_device

    device, where = assigned_device(placement)
    judged, error = runner(part_dir, apis, device)
    return judged, error and f"on {where} ({device} in the part): {error}"


def on_ray(engine: EngineChoice | None) -> bool:
    return engine is not None and engine.name == "ray"


def offered(devices: Sequence[str], engine: EngineChoice | None) -> Accelerators | None:
    """The accelerators that units on Ray ask for, one each, among ``-d``'s ``devices`` (the ids every node offers
    the job); None for the CPU, no ``-d`` or the local engine (where the caller places its units itself). The
    online receiver's actors follow the same rule (msprobe.core.online.receiver)."""
    return Accelerators.of(devices) if devices and on_ray(engine) else None


def place_parts(devices: Sequence[str], parts: int, engine: EngineChoice | None) -> tuple[list, Accelerators | None]:
    """Each part's placement, and the accelerators the parts ask Ray for (:func:`offered`): locally part K on
    ``devices[K mod count]``; on Ray one device that Ray assigns, or the CPU."""
    if not devices:
        return [None] * parts, None
    if not on_ray(engine):
        return [devices[k % len(devices)] for k in range(parts)], None
    offer = offered(devices, engine)
    return [offer or "cpu"] * parts, offer


def run_parts(runner: PartRunner, selected: Sequence[str], output_dir: str | os.PathLike, *,
              parts: int | None = None, csv_path: str | os.PathLike | None = None,
              error_data_dir: str | os.PathLike | None = None, details: DetailsLayout = DEFAULT_DETAILS,
              engine: EngineChoice | None = None, devices: Sequence[str] = (),
              **info: Any) -> tuple[dict[str, Any], int]:
    """Run ``selected`` (row names, in the dump's order) in ``parts`` processes (default
    ``min(DEFAULT_PARTS, CPUs)``, never more than the APIs) and merge their reports into
    ``output_dir`` (or, resuming, into ``csv_path`` and its details CSV). The parts write into a
    temporary folder ``output_dir/.multi_run_ut_*/part_K/``, removed afterwards, also on failure.
    ``error_data_dir``: where the parts' ``error_data/`` folders are moved (``None``: not saved).
    ``details``: the parts' details CSV layout (a framework's own, as its ``run_ut`` writes it).
    ``engine``: where the parts run (default: local processes; on Ray ``output_dir`` must be on a
    filesystem every node shares). ``devices``: the devices the parts replay on (:func:`place_parts`; the
    runner gets its part's), named as ``-d`` names them (``cpu``, ``cuda:N``, ``npu:N``); none: the runner's own.
    ``info`` goes into the merged summary. Returns (merged summary, APIs judged); raises
    :class:`PartError` naming the failing part(s)."""
    chunks = plan_parts(selected, parts)
    placements, offer = place_parts(devices, len(chunks), engine)
    if devices:
        info["devices"] = list(devices)
    out = report_dir(output_dir, csv_path)
    out.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=".multi_run_ut_", dir=out))
    try:
        dirs = [temp / f"part_{k}" for k in range(len(chunks))]
        logger.info("multi_run_ut: %d APIs in %d parts", len(selected), len(chunks))
        units = [(runner, str(d), chunk, where) for d, chunk, where in zip(dirs, chunks, placements)]
        with open_engine(engine, offer) as pool:
            try:
                outcomes = list(pool.map(_run_part, units, len(chunks), chunksize=1, isolated=True,
                                         accelerator=offer.kind if offer else None))
            except WorkerLost as exc:
                raise PartError(f"a part's process died: {exc}") from None
        errors = [f"part {k}: {msg}" for k, (_, msg) in enumerate(outcomes) if msg]
        if errors:
            raise PartError("; ".join(errors))
        checked = sum(n for n, _ in outcomes)
        summary = merge_parts(dirs, out, csv_path, details, parts=len(chunks), checked=checked, **info)
        if error_data_dir is not None:
            move_error_data(dirs, Path(error_data_dir))
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return summary, checked
