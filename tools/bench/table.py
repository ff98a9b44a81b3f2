"""The one result table of tools/bench: median wall and CPU time per step and the ratios to bare."""

from __future__ import annotations

import statistics


def print_table(samples: dict[str, list[tuple[float, float]]]) -> None:
    """Median wall and CPU time per step, and their ratios to the bare run. The CPU-time ratio is the
    steadier one on a shared machine (other processes' load does not enter it)."""
    wall = {mode: statistics.median(t[0] for t in values) for mode, values in samples.items()}
    cpu = {mode: statistics.median(t[1] for t in values) for mode, values in samples.items()}
    print(f"{'mode':36s} {'wall ms':>9s} {'ratio':>7s} {'cpu ms':>9s} {'ratio':>7s}")
    for mode in samples:
        print(
            f"{mode:36s} {wall[mode] * 1000:9.2f} {wall[mode] / wall['bare']:6.2f}x"
            f" {cpu[mode] * 1000:9.2f} {cpu[mode] / cpu['bare']:6.2f}x"
        )
