"""Ray in the tests: a loopback cluster as ``ray start`` runs one (:func:`loopback_cluster`), and the tests whose
Ray driver runs inside the test process (the ``local_ray`` fixtures) in a child pytest session.

A Ray driver inside the test session shares its process with every other test: its workers, its threads and,
should Ray abort on one of its internal checks, its end. Ray 2.60 did abort there (``Tried to complete task that was
not pending``), which ended the suite without a report; the cause was the engine's ``ray.cancel``, now gone
(docs/scale.md, Decisions). The child runs only the tests that use ``local_ray`` (tests/conftest.py); the parent
skips them and runs the child through :func:`run_child_session`: a child that fails, or dies without pytest's
summary, fails the parent with its output.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD = "MSPROBE_RAY_DRIVER_SESSION"
_ROOT = Path(__file__).resolve().parents[2]


def in_child_session() -> bool:
    return os.environ.get(CHILD) == "1"


def skip_unless_in_child_session() -> None:
    if not in_child_session():
        pytest.skip("an in-process Ray driver: run by this module's child-session test")


def run_child_session(test_file: str) -> None:
    """Run ``test_file``'s tests that use ``local_ray`` in a fresh pytest; fail with its output if any fails."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                          cwd=_ROOT, env={**os.environ, CHILD: "1"}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"child session exit {done.returncode}:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert " passed" in done.stdout, done.stdout[-2000:]


@contextlib.contextmanager
def loopback_cluster(temp_dir: Path | None = None) -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head node on 127.0.0.1, as ``ray start`` runs it on a cluster's head, with token authentication
    (Ray's default) whose token a command finds in its environment, as a cluster's users are told to → (address,
    environment). Stopped by its process group (``ray stop`` would stop every Ray of the machine); without
    ``temp_dir`` (Ray's own, where ``--ray-address auto`` looks) the address file it leaves is removed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    where = ["--temp-dir", str(temp_dir)] if temp_dir is not None else []
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address",
                             "127.0.0.1", "--port", str(port), "--num-cpus", "2", "--include-dashboard=false",
                             "--disable-usage-stats", *where], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # its group: head.pid
    try:
        output, _ = head.communicate(timeout=120)
        assert head.returncode == 0, output
        yield f"127.0.0.1:{port}", env
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        address_file = Path("/tmp/ray/ray_current_cluster")  # Ray's own place for it
        if temp_dir is None and address_file.is_file() and address_file.read_text().strip().endswith(f":{port}"):
            address_file.unlink()


@contextlib.contextmanager
def in_process_ray(module_name: str, visible: dict[str, str] | None = None, **devices: object) -> Iterator[None]:
    """A Ray started in this process (only in the child session), whose workers unpickle ``module_name``'s
    functions by value (they cannot import a test module). ``devices``: accelerators it declares without having
    them (``num_gpus=2``, ``resources={"NPU": 2}``), numbered as ``visible`` (visibility variable → ids) says,
    as a node started under ``CUDA_VISIBLE_DEVICES=3,5`` numbers its GPUs; Ray hands them out and sets the
    variables for its tasks without looking for hardware."""
    skip_unless_in_child_session()
    import ray

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")  # ray.init would set it for the rest of the session
        with pytest.MonkeyPatch.context() as start:  # for Ray's start only: its processes inherit them
            for name, ids in (visible or {}).items():
                start.setenv(name, ids)
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
                     **devices)  # type: ignore[arg-type]
        ray.cloudpickle.register_pickle_by_value(sys.modules[module_name])
        try:
            yield
        finally:
            ray.shutdown()
