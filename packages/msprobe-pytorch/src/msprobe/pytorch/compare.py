"""``compare`` and ``compare_distributed`` for PyTorch dumps: the core engine with a ``.pt`` loader.

The loader is :func:`msprobe.pytorch.tensor_files.load_pt`: a dump's ``.pt`` files read without torch when
they are plain tensors, checked against dump.json's shape and dtype before any element is copied.
"""

from __future__ import annotations

import os
from typing import Any

from msprobe.core.compare.api import compare_api, compare_distributed_api
from msprobe.pytorch.tensor_files import load_pt

__all__ = ["compare", "compare_distributed"]


def compare(input_param: dict[str, Any], output_path: str | os.PathLike, stack_mode: bool = False,
            auto_analyze: bool = True, fuzzy_match: bool = False, attribute: int = 0, **options: Any):
    """Compare two PyTorch dumps; ``input_param`` holds ``npu_json_path``/``bench_json_path`` (1.1.1's
    keys) or ``npu_path``/``bench_path``, optionally ``stack_json_path``/``stack_path``. ``attribute=N``
    replays the first N diverging APIs on this machine's device (``msprobe.pytorch.run_ut.attribution``)."""
    replay = None
    if attribute:
        from msprobe.pytorch.run_ut.attribution import TorchReplay

        replay = TorchReplay()
    return compare_api(load_pt, input_param, output_path, stack_mode, auto_analyze, fuzzy_match,
                       attribute=attribute, replay=replay, **options)


def compare_distributed(npu_dump_dir: str | os.PathLike, bench_dump_dir: str | os.PathLike,
                        output_path: str | os.PathLike, **options: Any):
    """Compare two step directories rank by rank; see :func:`msprobe.core.compare.compare_steps`."""
    return compare_distributed_api(load_pt, npu_dump_dir, bench_dump_dir, output_path, **options)
