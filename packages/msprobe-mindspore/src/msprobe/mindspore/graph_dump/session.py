"""The L2 debugger lifecycle for MindSpore static graph: the same ``start``/``stop``/``step`` as PyNative.

MindSpore decides what to dump itself (from the configuration written at construction), so ``start`` has
nothing to switch on. ``stop``/``step`` file the kernel files of the iterations finished so far under
``step{N}/rank{R}/graph{G}/`` and apply the task: ``tensor`` keeps them and adds ``statistic.csv``;
``statistics`` writes ``statistic.csv`` and deletes the tensors (kept when ``MSPROBE_KEEP_KERNEL_TENSORS=1``);
``overflow_check`` keeps only overflowing kernels and names the first one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.lifecycle.layout import claim_step_dir
from msprobe.core.services.log import logger, set_rank
from msprobe.core.tasks.overflow_check import OverflowCheckConfig
from msprobe.mindspore.graph_dump import config as dump_config
from msprobe.mindspore.graph_dump.kernel_files import KernelFile, iteration_dirs, move_iteration
from msprobe.mindspore.graph_dump.overflow import find_overflows
from msprobe.mindspore.graph_dump.statistics import write_statistic_csv

KEEP_TENSORS_ENV = "MSPROBE_KEEP_KERNEL_TENSORS"


def _wait_for_launched_kernels() -> None:
    """Every kernel launched so far has run and been dumped (``mindspore.runtime.synchronize`` has no CPU)."""
    from msprobe.mindspore.private_api import _pynative_executor

    _pynative_executor.sync()


class GraphDumpSession:
    """Step and rank bookkeeping around MindSpore's kernel dump (duck-types
    :class:`msprobe.core.lifecycle.session.Session`)."""

    def __init__(self, config: DebuggerConfig, current_rank: Callable[[], int | None]) -> None:
        import mindspore as ms

        self.config = config
        self._current_rank = current_rank
        device_target = ms.get_context("device_target")
        self.kernel_root = dump_config.install(config, device_target)
        self._device_statistics = dump_config.saves_statistics_on_device(device_target)
        self._keep_tensors = os.environ.get(KEEP_TENSORS_ENV, "") == "1"
        self._origins_found = 0
        self.current_step = 0
        self.finished = False
        if ms.get_context("mode") != ms.GRAPH_MODE:
            logger.info("PyNative mode: level L2 dumps only the functions compiled with mindspore.jit")

    def start(self, model: Any = None, scheduled_tokens: Any = None) -> None:
        """Nothing to switch on: MindSpore dumps the selected iterations of every compiled graph (whole
        tensors: ``slice`` and ``request_id`` are refused at level L2)."""

    def forward_backward_dump_end(self) -> None:
        """Kernels of a compiled step cannot be told apart by phase; the whole iteration is dumped."""

    def stop(self) -> None:
        """File the kernel files of every iteration up to the current step."""
        self._collect(self.current_step)

    def step(self) -> None:
        self._collect(self.current_step)
        self.current_step += 1
        if self.config.step and self.current_step > max(self.config.step):
            self.finish()

    def finish(self) -> None:
        if self.finished:
            return
        self._collect(None)
        self.finished = True
        logger.info(f"msprobe has finished: kernel dumps are under {self.config.dump_path}")

    # ------------------------------------------------------------------ filing
    def _collect(self, up_to: int | None) -> None:
        if self.finished:
            return
        _wait_for_launched_kernels()
        rank = self._current_rank()
        set_rank(rank)
        selected = not self.config.rank or (rank or 0) in self.config.rank
        for found in iteration_dirs(self.kernel_root, rank or 0, up_to):
            if not selected:  # support_device cannot name this rank: MindSpore dumped it anyway
                shutil.rmtree(found.path)
                continue
            step = claim_step_dir(self.config.dump_path, found.iteration, rank, self.config.dump_format)
            target = step / f"graph{found.graph_id}"
            target.mkdir(mode=0o750, exist_ok=True)
            self._apply_task(target, move_iteration(found.path, target), found.iteration)
            if not any(target.iterdir()):  # nothing of this iteration was kept (overflow_check without overflow)
                os.removedirs(target)  # and the step directories above it, if empty
            if self.finished:
                return

    def _apply_task(self, directory: Path, kernel_files: list[KernelFile], step: int) -> None:
        if self.config.task == "overflow_check":
            self._keep_overflows(directory, kernel_files, step)
        elif self.config.task == "tensor":
            write_statistic_csv(directory, kernel_files)
        elif not self._device_statistics:  # statistics on CPU: MindSpore saved tensors only
            write_statistic_csv(directory, kernel_files)
            if not self._keep_tensors:
                for kernel_file in kernel_files:
                    kernel_file.path.unlink()

    def _keep_overflows(self, directory: Path, kernel_files: list[KernelFile], step: int) -> None:
        overflows = find_overflows(kernel_files)
        kept = {f.path for overflow in overflows for f in overflow.files}
        for kernel_file in kernel_files:
            if kernel_file.path not in kept:
                kernel_file.path.unlink()
        if not overflows:
            return
        write_statistic_csv(directory, sorted((f for o in overflows for f in o.files), key=lambda f: f.timestamp))
        origins = [o for o in overflows if o.origin]
        first = origins[0] if origins else overflows[0]
        logger.warning(
            f"overflow in step {step} ({directory.name}): {len(overflows)} kernel(s) with inf/NaN outputs; "
            f"the first {'origin' if first.origin else 'one'} in execution order is {first.kernel} "
            f"(output {list(first.output_slots)}); their tensors and statistic.csv are in {directory}"
        )
        self._origins_found += len(origins)
        limit = self.config.section_as(OverflowCheckConfig).overflow_nums
        if limit != -1 and self._origins_found >= limit:
            logger.info(f"overflow_nums = {limit} reached: overflow check stops")
            self.finished = True
