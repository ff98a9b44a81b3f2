"""API pre-check, the framework-free half: precision standards and verdicts (docs/run_ut.md)."""

from msprobe.core.run_ut.standards import (
    ERROR,
    PASS,
    SKIP,
    WARNING,
    OutputVerdict,
    StandardsTable,
    api_status,
    judge_output,
    load_standards,
    normalise_api,
    normalise_dtype,
)

__all__ = [
    "ERROR", "PASS", "SKIP", "WARNING", "OutputVerdict", "StandardsTable", "api_status", "judge_output",
    "load_standards", "normalise_api", "normalise_dtype",
]
