"""Two-rank MindSpore jobs on CPU for the tests: a script started by ``msrun --worker_num=2`` (MindSpore's
own launcher and CPU collective library), in its own folder, with the test process's import path."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(folder: Path, script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Write ``script`` as ``folder/train.py`` and start it on two ranks; worker logs go to ``folder/log``."""
    bin_dir = os.path.dirname(sys.executable)
    msrun = shutil.which("msrun", path=bin_dir) or shutil.which("msrun")
    assert msrun, "msrun (installed with mindspore) not found"
    environment = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
                   "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1", **(env or {})}
    environment.pop("MINDSPORE_DUMP_CONFIG", None)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(script)
    command = [msrun, "--worker_num=2", "--local_worker_num=2", f"--master_port={_free_port()}", "--join=True",
               f"--log_dir={folder / 'log'}", "train.py", *args]
    return subprocess.Popen(command, cwd=folder, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, folder: Path, timeout: float = 300) -> str:
    """Wait for a :func:`start`-ed job; its workers' logs, after asserting it succeeded (the logs if not)."""
    output, _ = process.communicate(timeout=timeout)
    logs = "".join(p.read_text(errors="replace") for p in sorted((folder / "log").glob("worker_*.log")))
    assert process.returncode == 0, f"{folder.name}: {output[-2000:]}\n{logs[-4000:]}"
    return logs
