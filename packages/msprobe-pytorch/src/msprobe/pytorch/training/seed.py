"""``seed_all``: fix every random source a comparison between two runs depends on."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from msprobe.core.services.log import logger


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, numpy and torch (CPU and every accelerator) with ``seed``; with ``mode=True``, also
    ask torch for deterministic algorithms (slower, but two runs on one device then agree)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed_all: seed must be an int in [0, 2**32), got {seed!r}")
    if not isinstance(mode, bool):
        raise ValueError(f"seed_all: mode must be a bool, got {mode!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every device's generator, CUDA and NPU included
    torch.use_deterministic_algorithms(mode)
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = mode
    torch.backends.cudnn.benchmark = False
    logger.info(f"seed_all: seed {seed}, deterministic algorithms {'on' if mode else 'off'}")
