"""Tests whose Ray driver runs inside the test process (the ``local_ray`` fixtures) run in a child pytest session.

Ray 2.60's driver aborts its whole process on an internal check when a task's worker is killed at the wrong
moment ("Tried to complete task that was not pending": an actor killed mid-call, about one run in five on two
loaded cores, also after a task's worker was killed; docs/scale.md#what-is-built-and-what-is-not): inside the test
session that ended the suite without a report. The child runs only the tests that use ``local_ray``
(tests/conftest.py); the parent skips them and runs the child through :func:`run_child_session`, again (up to
:data:`ATTEMPTS` in all) when Ray aborted it (no pytest summary): a test that fails fails the parent with the
child's output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = "MSPROBE_RAY_DRIVER_SESSION"
ATTEMPTS = 3
_ROOT = Path(__file__).resolve().parents[2]


def in_child_session() -> bool:
    return os.environ.get(CHILD) == "1"


def skip_unless_in_child_session() -> None:
    if not in_child_session():
        pytest.skip("an in-process Ray driver: run by this module's child-session test")


def run_child_session(test_file: str) -> None:
    """Run ``test_file``'s tests that use ``local_ray`` in a fresh pytest; fail with its output if any fails."""
    for _ in range(ATTEMPTS):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                              cwd=_ROOT, env={**os.environ, CHILD: "1"}, capture_output=True, text=True, timeout=900)
        if _SUMMARY.search(done.stdout):  # pytest finished: its verdict stands
            break
        print(f"the child session died without a report (exit {done.returncode}): Ray aborted the driver; again")
    assert done.returncode == 0, f"child session exit {done.returncode}:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert " passed" in done.stdout, done.stdout[-2000:]


_SUMMARY = re.compile(r"\d+ (passed|failed|errors?)\b")
