"""Compare the gradient directions of two grad-probe runs (levels L1/L2 save them).

For each step both runs recorded, and each parameter both saved, the similarity is the fraction of
elements whose sign pattern (``grad > 0``) agrees; the step's total weights every parameter by its
element count. A run's first diverging step is the first whose total is below
:attr:`GradComparator.threshold`, or fell by more than :attr:`GradComparator.max_drop` from the
step before — the point where the two trainings stopped pushing the weights the same way.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprobe.core.services.fileio import make_dir, write_csv
from msprobe.core.grad_probe.plot import plot_parameters, plot_total
from msprobe.core.services.log import logger

_STEP_DIR = re.compile(r"step(\d+)")
_RANK_DIR = re.compile(r"rank(\d+)")


class GradCompareError(ValueError):
    """The two inputs cannot be compared (missing directories, no common data, mismatched shapes)."""


@dataclass(frozen=True)
class GradCompareResult:
    """Similarities of one rank: ``similarities[param][i]`` belongs to ``steps[i]`` (None: not saved)."""

    steps: list[int]
    similarities: dict[str, list[float | None]]
    totals: list[float]
    first_diverging_step: int | None
    csv_path: Path


def _numbered_dirs(parent: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    found = (pattern.fullmatch(p.name) for p in parent.iterdir() if p.is_dir())
    return {int(m.group(1)): parent / m.group(0) for m in found if m}


def _require_dir(path: Path, what: str) -> None:
    if not path.is_dir():
        raise GradCompareError(f"{what} {str(path)!r} is not a directory")


def _param_order(rank_dir: Path, step: int, stems: set[str]) -> list[str]:
    """Parameters in model order, as the step's summary CSV lists them; alphabetical without it."""
    csv_path = rank_dir / f"grad_summary_{step}.csv"
    ordered: list[str] = []
    if csv_path.is_file():
        with open(csv_path, encoding="utf-8-sig", newline="") as handle:
            ordered = [row[0] for row in list(csv.reader(handle))[1:] if row and row[0] in stems]
    return ordered + sorted(stems.difference(ordered))


def _load_signs(path: Path) -> np.ndarray:
    signs = np.load(path, allow_pickle=False)
    if signs.dtype != np.bool_:
        raise GradCompareError(f"{str(path)!r} holds {signs.dtype} values; a grad-probe sign file is bool")
    return signs


def _agreement(path_a: Path, path_b: Path, step: int) -> tuple[int, int]:
    """(agreeing elements, elements) of one parameter at one step."""
    a, b = _load_signs(path_a), _load_signs(path_b)
    if a.shape != b.shape:
        raise GradCompareError(
            f"step {step}, parameter {path_a.stem!r}: shape {list(a.shape)} in {str(path_a)!r} "
            f"but {list(b.shape)} in {str(path_b)!r}"
        )
    return int(np.count_nonzero(a == b)), a.size


class GradComparator:
    """Sign-similarity comparison of two grad-probe outputs, one rank or all ranks."""

    threshold = 0.97
    max_drop = 0.03

    @classmethod
    def first_diverging_step(cls, steps: list[int], totals: list[float]) -> int | None:
        previous = None
        for step, total in zip(steps, totals):
            if total < cls.threshold or (previous is not None and previous - total > cls.max_drop):
                return step
            previous = total
        return None

    @classmethod
    def compare(cls, dir_a: str | Path, dir_b: str | Path, out_dir: str | Path) -> GradCompareResult:
        """Compare two rank directories (``.../rank{R}`` holding ``step{S}/``) and write the results."""
        rank_a, rank_b, out = Path(dir_a), Path(dir_b), Path(out_dir)
        _require_dir(rank_a, "first input")
        _require_dir(rank_b, "second input")
        steps_a, steps_b = _numbered_dirs(rank_a, _STEP_DIR), _numbered_dirs(rank_b, _STEP_DIR)
        steps = sorted(steps_a.keys() & steps_b.keys())
        if not steps:
            raise GradCompareError(
                f"no step directory is in both {str(rank_a)!r} ({len(steps_a)} steps) and "
                f"{str(rank_b)!r} ({len(steps_b)} steps); sign files need grad_level L1 or L2"
            )
        if steps_a.keys() ^ steps_b.keys():
            logger.warning("grad compare: steps %s are in only one input; skipped",
                           sorted(steps_a.keys() ^ steps_b.keys()))
        similarities: dict[str, list[float | None]] = {}
        totals: list[float] = []
        for index, step in enumerate(steps):
            files_a = {p.stem: p for p in steps_a[step].glob("*.npy")}
            files_b = {p.stem: p for p in steps_b[step].glob("*.npy")}
            if files_a.keys() ^ files_b.keys():
                logger.warning("grad compare: step %d, parameters %s are in only one input; skipped",
                               step, sorted(files_a.keys() ^ files_b.keys()))
            common = files_a.keys() & files_b.keys()
            if not common:
                raise GradCompareError(f"step {step}: the two inputs have no parameter in common")
            agreeing = elements = 0
            for name in _param_order(rank_a, step, common):
                agree, size = _agreement(files_a[name], files_b[name], step)
                agreeing, elements = agreeing + agree, elements + size
                similarities.setdefault(name, [None] * len(steps))[index] = agree / size if size else 1.0
            totals.append(agreeing / elements if elements else 1.0)
        return cls._report(out, steps, similarities, totals, f"{rank_a} vs {rank_b}")

    @classmethod
    def _report(cls, out: Path, steps: list[int], similarities: dict[str, list[float | None]],
                totals: list[float], label: str) -> GradCompareResult:
        make_dir(out)
        names = list(similarities)
        rows = [
            [step, total, *("" if similarities[n][i] is None else similarities[n][i] for n in names)]
            for i, (step, total) in enumerate(zip(steps, totals))
        ]
        csv_path = out / "similarities.csv"
        write_csv(csv_path, ["step", "total", *names], rows)
        diverging = cls.first_diverging_step(steps, totals)
        plot_parameters(out / "similarities_picture", steps, similarities)
        plot_total(out / "summary_similarities.png", steps, totals, diverging)
        if diverging is None:
            logger.info("grad compare %s: no diverging step over steps %d-%d; results in %s",
                        label, steps[0], steps[-1], csv_path)
        else:
            logger.info("grad compare %s: first diverging step %d (total sign similarity %.4f); "
                        "results in %s", label, diverging, totals[steps.index(diverging)], csv_path)
        return GradCompareResult(steps, similarities, totals, diverging, csv_path)

    @classmethod
    def compare_distributed(cls, dir_a: str | Path, dir_b: str | Path,
                            out_dir: str | Path) -> dict[int, GradCompareResult]:
        """Compare every ``rank{R}`` present in both dump paths into ``out_dir/rank{R}/``."""
        root_a, root_b = Path(dir_a), Path(dir_b)
        _require_dir(root_a, "first input")
        _require_dir(root_b, "second input")
        ranks_a, ranks_b = _numbered_dirs(root_a, _RANK_DIR), _numbered_dirs(root_b, _RANK_DIR)
        ranks = sorted(ranks_a.keys() & ranks_b.keys())
        if not ranks:
            raise GradCompareError(f"no rank directory is in both {str(root_a)!r} and {str(root_b)!r}")
        if ranks_a.keys() ^ ranks_b.keys():
            logger.warning("grad compare: ranks %s are in only one input; skipped",
                           sorted(ranks_a.keys() ^ ranks_b.keys()))
        return {r: cls.compare(ranks_a[r], ranks_b[r], Path(out_dir) / f"rank{r}") for r in ranks}


def compare_command(input1: str, input2: str, output: str) -> int:
    """Entry point for ``msprobe grad_compare``: dump paths (with ``rank*/``) or rank directories.

    Returns the process exit status: 0 when compared (diverging or not), 1 when the inputs cannot be.
    """
    try:
        first = Path(input1)
        _require_dir(first, "first input")
        if _numbered_dirs(first, _RANK_DIR):
            GradComparator.compare_distributed(input1, input2, output)
        else:
            GradComparator.compare(input1, input2, output)
    except (GradCompareError, OSError) as error:
        logger.error("grad compare failed: %s", error)
        return 1
    return 0
