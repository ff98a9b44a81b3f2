"""Overflow detection from an L2 kernel dump, for devices without MindSpore's overflow facility (CPU, GPU).

A kernel overflows when one of its outputs holds inf or NaN. It is the *origin* when all its dumped inputs
are finite, and *inherited* when a non-finite value was already flowing in; the first origin in execution
order is where the numbers went wrong.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from msprobe.mindspore.graph_dump.kernel_files import KernelFile
from msprobe.mindspore.graph_dump.statistics import load_tensor


@dataclass(frozen=True)
class KernelOverflow:
    kernel: str  # "{op_type}.{op_name}"
    output_slots: tuple[int, ...]  # the outputs that hold inf or NaN
    origin: bool
    files: tuple[KernelFile, ...]  # every dumped tensor of the kernel, in execution order


def _not_finite(kernel_file: KernelFile) -> bool:
    values = load_tensor(kernel_file)
    return values.dtype.kind in "fc" and not bool(np.isfinite(values).all())


def find_overflows(kernel_files: list[KernelFile]) -> list[KernelOverflow]:
    """The overflowing kernels among ``kernel_files`` (all of one iteration), in execution order."""
    by_kernel: dict[str, list[KernelFile]] = defaultdict(list)
    for kernel_file in sorted(kernel_files, key=lambda f: f.timestamp):
        by_kernel[kernel_file.kernel].append(kernel_file)
    found = []
    for kernel, files in by_kernel.items():
        bad_outputs = tuple(f.slot for f in files if f.io == "output" and f.path.suffix == ".npy" and _not_finite(f))
        if bad_outputs:
            inherited = any(f.io == "input" and f.path.suffix == ".npy" and _not_finite(f) for f in files)
            found.append(KernelOverflow(kernel, bad_outputs, not inherited, tuple(files)))
    return found
