"""What a grad-probe step writes: ``grad_summary_{step}.csv`` and the per-parameter sign arrays.

The framework side reduces every selected gradient on its device to one row of numbers laid out as
:func:`stat_width` describes, stacks the rows and fetches them to the host once per step; this module
turns that matrix into the CSV of msprobe 1.1.1 (header by level, see :func:`summary_header`) and
saves ``rank{R}/step{S}/{param}.npy`` (bool, ``grad > 0``) for levels L1 and L2.

Layout of one parameter's statistics vector (float64):
``[max, min, norm]`` and, at L2 only, ``count(g <= b_0), ..., count(g <= b_k), count(g > b_k),
count(g == 0)``. Interval ``(b_{i-1}, b_i]`` is the difference of two cumulative counts, so a NaN
element falls in no interval and the fractions then sum to less than one — visibly.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.services.fileio import atomic_write_bytes, check_writable_path, make_dir, write_csv

GRAD_LEVELS = ("L0", "L1", "L2")
_STAT_TAIL = ["max", "min", "norm", "shape"]
_INT64_MAX = 2**63 - 1


def format_bound(bound: float) -> str:
    """``-1.0`` → ``"-1"``, ``0.01`` → ``"0.01"``: integral bounds print as 1.1.1 printed the JSON ints."""
    value = float(bound)
    return str(int(value)) if value.is_integer() else repr(value)


def interval_labels(bounds: Sequence[float]) -> list[str]:
    """``[-1, 0, 1]`` → ``["(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)"]``."""
    edges = ["-inf", *(format_bound(b) for b in bounds), "inf"]
    labels = [f"({low}, {high}]" for low, high in zip(edges[:-2], edges[1:-1])]
    return [*labels, f"({edges[-2]}, inf)"]


def summary_header(grad_level: str, bounds: Sequence[float]) -> list[str]:
    """The CSV header of the seed's table 1.7 for ``grad_level``."""
    if grad_level == "L0":
        return ["param_name", "MD5", *_STAT_TAIL]
    if grad_level == "L1":
        return ["param_name", *_STAT_TAIL]
    return ["param_name", *interval_labels(bounds), "=0", *_STAT_TAIL]


def stat_width(grad_level: str, bounds: Sequence[float]) -> int:
    """Length of one parameter's statistics vector (see the module docstring)."""
    return 3 + (len(bounds) + 2 if grad_level == "L2" else 0)


def statistics_parts(grad: Any, norm: Any, bounds: Sequence[float] | None) -> list[Any]:
    """One gradient's statistics in the layout above, as 0-d tensors of its own framework, still on its
    device: ``grad`` is any tensor with ``max()``, ``min()``, comparisons and ``sum()`` (torch, MindSpore,
    numpy); ``norm`` is its norm, computed by the framework; ``bounds`` is ``None`` below L2."""
    parts = [grad.max(), grad.min(), norm]
    if bounds is not None:
        parts += [(grad <= bound).sum() for bound in bounds]
        parts += [(grad > bounds[-1]).sum(), (grad == 0).sum()]
    return parts


def gradient_checksum(values: np.ndarray) -> str:
    """The ``MD5`` column: CRC-32 of the float32 bytes, 8 hex digits, exactly as msprobe 1.1.1 wrote it."""
    return f"{zlib.crc32(np.ascontiguousarray(values, dtype=np.float32).tobytes()):08x}"


def safe_file_stem(param_name: str) -> str:
    """A parameter name usable as a file name: no path separators, never ``.`` or ``..``."""
    stem = param_name.replace("/", "_").replace("\\", "_").replace("\x00", "_")
    if not stem.strip("."):
        stem = stem.replace(".", "_") or "_"
    return stem


def _problems_in_indices(field: str, values: object) -> list[str]:
    if not isinstance(values, (list, tuple)):
        return [f"{field}={values!r}: expected a list of integers >= 0 (empty = all)"]
    return [
        f"{field}[{i}]={v!r}: expected an integer >= 0"
        for i, v in enumerate(values)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0
    ]


def _problems_in_bounds(bounds: object) -> list[str]:
    allowed = "a non-empty list of finite numbers in int64 range, strictly increasing"
    if not isinstance(bounds, (list, tuple)) or not bounds:
        return [f"bounds={bounds!r}: expected {allowed}"]
    bad = [
        f"bounds[{i}]={b!r}: expected a finite number in int64 range"
        for i, b in enumerate(bounds)
        if isinstance(b, bool) or not isinstance(b, (int, float))
        or not math.isfinite(b) or abs(b) > _INT64_MAX
    ]
    if bad:
        return bad
    if any(low >= high for low, high in zip(bounds, bounds[1:])):
        return [f"bounds={list(bounds)!r}: expected {allowed}"]
    return []


@dataclass(frozen=True)
class GradProbeSettings:
    """Validated grad-probe options shared by both frameworks' ``GradMonitor``."""

    dump_path: Path
    grad_level: str
    param_list: tuple[str, ...]
    bounds: tuple[float, ...]
    steps: frozenset[int]
    ranks: frozenset[int]

    @classmethod
    def create(
        cls,
        dump_path: str,
        grad_level: str,
        param_list: Sequence[str],
        bounds: Sequence[float],
        steps: Sequence[int],
        ranks: Sequence[int],
    ) -> GradProbeSettings:
        """Check every argument and raise one ``ValueError`` that lists all problems found."""
        problems: list[str] = []
        if not isinstance(dump_path, (str, Path)) or not str(dump_path):
            problems.append(f"dump_path={dump_path!r}: expected a non-empty directory path")
        if grad_level not in GRAD_LEVELS:
            problems.append(f"grad_level={grad_level!r}: expected one of {', '.join(GRAD_LEVELS)}")
        if not isinstance(param_list, (list, tuple)) or not all(isinstance(p, str) and p for p in param_list):
            problems.append(f"param_list={param_list!r}: expected a list of non-empty parameter names")
        problems += _problems_in_bounds(bounds)
        problems += _problems_in_indices("steps", steps)
        problems += _problems_in_indices("ranks", ranks)
        if problems:
            raise ValueError("invalid grad_probe settings:\n  " + "\n  ".join(problems))
        return cls(
            dump_path=check_writable_path(dump_path),
            grad_level=grad_level,
            param_list=tuple(param_list),
            bounds=tuple(float(b) for b in bounds),
            steps=frozenset(steps),
            ranks=frozenset(ranks),
        )

    @property
    def saves_signs(self) -> bool:
        return self.grad_level != "L0"

    def records(self, step: int, rank: int) -> bool:
        """Whether ``step`` on ``rank`` is selected (an empty filter selects everything)."""
        return (not self.steps or step in self.steps) and (not self.ranks or rank in self.ranks)

    def selects(self, param_name: str) -> bool:
        """Whether a parameter is monitored: ``param_list`` empty, or an entry equal to or contained in it."""
        return not self.param_list or any(entry in param_name for entry in self.param_list)

    def unmatched_entries(self, param_names: Sequence[str]) -> list[str]:
        """``param_list`` entries that select no parameter at all (most likely typos)."""
        return [entry for entry in self.param_list if not any(entry in name for name in param_names)]


def _summary_row(settings: GradProbeSettings, name: str, shape: tuple[int, ...], stats: np.ndarray,
                 checksum: str | None) -> list[object]:
    numel = math.prod(shape)
    head: list[object] = [name]
    if settings.grad_level == "L0":
        head.append(checksum)
    elif settings.grad_level == "L2":
        k = len(settings.bounds)
        cumulative = stats[3:3 + k]
        counts = [cumulative[0], *np.diff(cumulative), stats[3 + k]]
        head += [float(c) / numel for c in counts] + [float(stats[4 + k]) / numel]
    return [*head, float(stats[0]), float(stats[1]), float(stats[2]), str(list(shape))]


def _split(flat: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    ends = np.cumsum([math.prod(s) for s in shapes])
    if flat.size != (ends[-1] if len(ends) else 0):
        raise ValueError(f"flattened array has {flat.size} elements; the shapes need {ends[-1]}")
    return [part.reshape(shape) for part, shape in zip(np.split(flat, ends[:-1]), shapes)]


def write_step(
    settings: GradProbeSettings,
    rank: int,
    step: int,
    names: Sequence[str],
    shapes: Sequence[tuple[int, ...]],
    stats: np.ndarray,
    signs: np.ndarray | None = None,
    values: np.ndarray | None = None,
) -> Path:
    """Write one step's files and return the CSV path.

    ``stats`` is the (parameters × :func:`stat_width`) matrix; ``signs`` the concatenated, flattened
    ``grad > 0`` arrays (needed for L1/L2); ``values`` the concatenated float32 gradients (needed for
    L0's checksum). Parameters appear in the order given.
    """
    width = stat_width(settings.grad_level, settings.bounds)
    if stats.shape != (len(names), width):
        raise ValueError(f"stats has shape {stats.shape}; expected ({len(names)}, {width})")
    rank_dir = make_dir(settings.dump_path / f"rank{rank}")
    checksums: list[str | None] = [None] * len(names)
    if settings.grad_level == "L0":
        if values is None:
            raise ValueError("grad_level L0 needs the gradient values for the MD5 column")
        checksums = [gradient_checksum(part) for part in _split(values, shapes)]
    rows = [_summary_row(settings, n, s, row, c) for n, s, row, c in zip(names, shapes, stats, checksums)]
    csv_path = rank_dir / f"grad_summary_{step}.csv"
    write_csv(csv_path, summary_header(settings.grad_level, settings.bounds), rows)
    if settings.saves_signs:
        if signs is None:
            raise ValueError(f"grad_level {settings.grad_level} needs the sign arrays")
        step_dir = make_dir(rank_dir / f"step{step}")
        for name, sign in zip(names, _split(signs.astype(bool, copy=False), shapes)):
            buffer = io.BytesIO()
            np.save(buffer, sign, allow_pickle=False)
            atomic_write_bytes(step_dir / f"{safe_file_stem(name)}.npy", buffer.getvalue())
    return csv_path
