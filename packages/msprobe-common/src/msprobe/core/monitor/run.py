"""One rank's monitoring session, framework-free: which steps are collected, where the files go, the
writers and alerts after each step, and the dynamic on/off switch.

Output goes to ``$MONITOR_OUTPUT_DIR`` (default ``./monitor_output``), in a folder per rank and run named
as upstream names it, ``{Mon}{DD}_{HH}-{MM}-{SS}-rank{R}-{8 hex}``, created when the first step is written.

Dynamic switching: the configuration file is ``stat``-ed once per step; when it changed, it is read and
checked again (a bad file is logged, the previous configuration kept) and its counting restarts. With
``DYNAMIC_MONITOR=true`` in the environment (upstream's switch) monitoring starts off and follows the
file's ``dynamic_on``; without it, monitoring starts on, and a changed file that states ``dynamic_on``
turns it on or off.
"""

from __future__ import annotations

import logging
import os
import uuid
import weakref
from datetime import datetime
from pathlib import Path

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.monitor.alerts import Alert, AlertTracker
from msprobe.core.monitor.config import MonitorConfig, load_monitor_config
from msprobe.core.monitor.ops import reductions_for
from msprobe.core.monitor.records import StepMetrics
from msprobe.core.monitor.writers import MetricWriter, open_writers
from msprobe.core.services.fileio import make_dir

logger = logging.getLogger("msprobe")
OUTPUT_ENV, DEFAULT_OUTPUT = "MONITOR_OUTPUT_DIR", "./monitor_output"
DYNAMIC_ENV = "DYNAMIC_MONITOR"


def dynamic_from_env() -> bool:
    value = os.environ.get(DYNAMIC_ENV, "false")
    if value.lower() not in ("true", "false"):
        raise ConfigError([Problem(DYNAMIC_ENV, value, "'true' or 'false' (any case)")], detail=None)
    return value.lower() == "true"


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class MonitorRun:
    """The state of monitoring on one rank; the framework's TrainerMon asks it what to collect each step."""

    def __init__(self, config_path: str | os.PathLike, rank: int) -> None:
        self.path = os.fspath(config_path)
        self.rank = rank
        self.dynamic = dynamic_from_env()
        self.config: MonitorConfig = load_monitor_config(self.path)
        self.mtime = _mtime(self.path)
        self.enabled = bool(self.config.dynamic_on) if self.dynamic else True
        self.collected = 0
        self.directory: Path | None = None
        self.writers: list[MetricWriter] = []  # changed in place: the finalizer holds this very list
        # TrainerMon has no close() (upstream's has none): the files are closed after the last step to collect,
        # and otherwise when the run is garbage-collected or the interpreter exits
        weakref.finalize(self, _close_all, self.writers)
        self.alerts: AlertTracker | None = None
        self.name = f"{datetime.now().strftime('%b%d_%H-%M-%S')}-rank{rank}-{uuid.uuid4().hex[:8]}"

    @property
    def reductions(self) -> tuple[str, ...]:
        return reductions_for(self.config.ops)

    def collects(self, step: int) -> bool:
        ranks = self.config.module_ranks
        return (
            self.enabled
            and (not ranks or self.rank in ranks)
            and self.config.collects(step, self.collected)
        )

    def done(self) -> bool:
        """No later step will be collected until the file changes: the framework may remove its hooks."""
        return not self.enabled or self.collected >= self.config.collect_times

    def reload_if_changed(self) -> bool:
        """Read the file again if its modification time changed; True when the configuration was replaced."""
        mtime = _mtime(self.path)
        if mtime == self.mtime:
            return False
        self.mtime = mtime
        try:
            config = load_monitor_config(self.path)
        except ConfigError as error:
            logger.error("monitor: configuration not reloaded, the previous one stays: %s", error)
            return False
        _close_all(self.writers)
        self.config, self.collected = config, 0
        if config.dynamic_on is not None or self.dynamic:
            self.enabled = bool(config.dynamic_on)
        logger.info("monitor: configuration %s reloaded; monitoring %s", self.path, "on" if self.enabled else "off")
        return True

    def write(self, metrics: StepMetrics) -> Alert | None:
        """Hand one collected step to every writer and the alert rules."""
        self.collected += 1
        if not self.writers:
            self._open()
        for writer in self.writers:
            writer.write(metrics)
        alert = self.alerts.check(metrics)
        if self.collected >= self.config.collect_times:
            _close_all(self.writers)  # the last step to collect until the file changes
        return alert

    def _open(self) -> None:
        if self.directory is None:
            self.directory = make_dir(Path(os.environ.get(OUTPUT_ENV, DEFAULT_OUTPUT)) / self.name)
        config = self.config
        self.writers[:] = open_writers(config.formats, self.directory, config.ndigits, config.step_count_per_record)
        if self.alerts is None:
            self.alerts = AlertTracker(config.rules, self.directory)
        self.alerts.rules = config.rules  # a reload keeps the run's alerts and histories


def _close_all(writers: list[MetricWriter]) -> None:
    for writer in writers:
        writer.close()
    writers.clear()


