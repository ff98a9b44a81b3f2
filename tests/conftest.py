"""Shared fixtures for the whole suite."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import resource
import signal

import pytest

from msprobe.core.tasks.builtin import load_builtin_tasks


def pytest_configure(config) -> None:
    # tests read config.json directly; like the debugger and the msprobe command, they register the tasks first
    load_builtin_tasks()
    config.addinivalue_line(
        "markers",
        "frameworks(*names): needs these msprobe framework packages (skipped where msprobe-common is alone)",
    )


def pytest_collection_modifyitems(config, items) -> None:
    """In the child session of an in-process Ray driver (tests/common/ray_driver.py) only the tests that use the
    ``local_ray`` fixture run."""
    if os.environ.get("MSPROBE_RAY_DRIVER_SESSION") != "1":
        return
    keep = [item for item in items if "local_ray" in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def pytest_runtest_setup(item) -> None:
    """``tests/common`` also runs with msprobe-common alone; tests of a framework's commands skip there."""
    marker = item.get_closest_marker("frameworks")
    if marker is not None:
        missing = [name for name in marker.args if importlib.util.find_spec(f"msprobe.{name}") is None]
        if missing:
            pytest.skip(f"needs msprobe-{', msprobe-'.join(missing)}")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]

    def text(self) -> str:
        return "\n".join(self.messages)


@pytest.fixture
def msprobe_log():
    """Records every message of the ``msprobe`` logger, whatever handlers the application has.

    Use ``msprobe_log.messages`` (list of str) or ``msprobe_log.text()``.
    """
    logger = logging.getLogger("msprobe")
    handler = _Records()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@pytest.fixture(autouse=True)
def _finish_running_debugger():
    """No test leaves a PrecisionDebugger running (hooks installed) for the next one."""
    yield
    from msprobe.core.lifecycle.debugger import BaseDebugger

    if BaseDebugger._active is not None:
        BaseDebugger._active.finish()


@contextlib.contextmanager
def _file_size_limit(limit: int):
    """The kernel refuses every write past ``limit`` bytes of a file (EFBIG): a full disk for any user."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@pytest.fixture
def file_size_limit():
    """``with file_size_limit(4096): ...`` — writes past 4096 bytes of any file fail as on a full disk."""
    return _file_size_limit
