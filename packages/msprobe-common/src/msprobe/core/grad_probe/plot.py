"""Figures of the grad comparison: one line plot per parameter and one for the weighted total.

matplotlib is imported inside the functions (``msprobe.core`` stays cheap to import) and used through
its object API with the Agg canvas, so we never touch pyplot's global backend in the user's process.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from msprobe.core.services.fileio import atomic_write_bytes, make_dir
from msprobe.core.grad_probe.summary import safe_file_stem


def _line_figure_png(title: str, steps: Sequence[int], values: Sequence[float | None],
                     marked_step: int | None = None) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    points = [(s, v) for s, v in zip(steps, values) if v is not None]
    axes.plot([s for s, _ in points], [v for _, v in points], marker="o")
    if marked_step is not None:
        axes.axvline(marked_step, color="red", linestyle="--", label=f"first diverging step {marked_step}")
        axes.legend(loc="lower left")
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.set_ylabel("sign similarity")
    axes.set_ylim(-0.02, 1.02)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def plot_parameters(picture_dir: Path, steps: Sequence[int],
                    similarities: Mapping[str, Sequence[float | None]]) -> None:
    """``picture_dir/{param}.png``: that parameter's sign similarity over the compared steps."""
    make_dir(picture_dir)
    for name, values in similarities.items():
        png = _line_figure_png(name, steps, values)
        atomic_write_bytes(picture_dir / f"{safe_file_stem(name)}.png", png)


def plot_total(path: Path, steps: Sequence[int], totals: Sequence[float], diverging_step: int | None) -> None:
    """``summary_similarities.png``: the element-weighted similarity over all parameters, per step."""
    png = _line_figure_png("all parameters (element-weighted)", steps, totals, diverging_step)
    atomic_write_bytes(path, png)
