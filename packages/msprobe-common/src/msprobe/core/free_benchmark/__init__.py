"""Free benchmark (docs/free_benchmark.md): find unstable APIs without a second device by re-running them on
perturbed inputs. The framework-free half: thresholds and comparison (:mod:`.compare`), preheat
calibration (:mod:`.preheat`), the collector that checks or fixes calls (:mod:`.collector`), and what a
framework supplies, with the part of it that is the same for every framework (:mod:`.ops`)."""

from __future__ import annotations

from typing import Any

from msprobe.core.free_benchmark.collector import CSV_COLUMNS, CSV_FILE, FreeBenchmarkCollector, read_rows
from msprobe.core.free_benchmark.compare import dtype_threshold, max_relative_error
from msprobe.core.free_benchmark.ops import BenchmarkOps, FrameworkBenchmarkOps, Skip
from msprobe.core.free_benchmark.preheat import Thresholds
from msprobe.core.lifecycle.select import selector_for

__all__ = [
    "CSV_COLUMNS", "CSV_FILE", "BenchmarkOps", "FrameworkBenchmarkOps", "FreeBenchmarkCollector", "Skip",
    "Thresholds", "dtype_threshold", "free_benchmark_collector", "max_relative_error", "read_rows",
]


def free_benchmark_collector(config: Any, ops: BenchmarkOps) -> FreeBenchmarkCollector:
    """The collector a validated ``free_benchmark`` configuration asks for."""
    section = config.section
    return FreeBenchmarkCollector(
        dump_path=config.dump_path,
        selector=selector_for(config, scope_is_names=True),
        ops=ops,
        pert_mode=section.pert_mode,
        handler_type=section.handler_type,
        fuzz_stage=section.fuzz_stage,
        thresholds=Thresholds(
            if_preheat=section.if_preheat, preheat_step=section.preheat_step, max_sample=section.max_sample
        ),
    )
