"""Run one training script once per variant, in parallel, each writing its own config_check pack (shared by
the PyTorch and MindSpore config_check tests; imported through sys.path: importlib mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_variants(script: Path, work: Path, variants: dict[str, tuple[list[str], dict[str, str]]]) -> dict[str, Path]:
    """``variants``: name → (command-line arguments, environment entries); the pack of each is
    ``work/<name>.zip`` (passed as CC_OUT). Every run must succeed."""
    running = {}
    for name, (arguments, extra) in variants.items():
        env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
        env.update(OMP_NUM_THREADS="1", CC_OUT=str(work / f"{name}.zip"), **extra)
        running[name] = subprocess.Popen([sys.executable, str(script), *arguments], env=env, cwd=work,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, process in running.items():
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, f"{name}: {err[-2000:]}"
    return {name: work / f"{name}.zip" for name in variants}
