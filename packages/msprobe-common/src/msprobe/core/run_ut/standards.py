"""Precision standards of the API pre-check (docs/run_ut.md#the-standards-and-their-numbers; tables in
``standards.json``).

One output of one replayed API is judged by :func:`judge_output` with the standard its API is assigned
in the data file, using that standard's numbers for the dtype the device ran in; an API's status is
the worst of its outputs (:func:`api_status`). Everything is float64 numpy: no framework here.

Statuses are the strings of the result CSV: ``pass``, ``Warning``, ``error`` and ``SKIP``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.judge import UNITS, cosine
from msprobe.core.run_ut import metrics as m

PASS, WARNING, ERROR, SKIP = "pass", "Warning", "error", "SKIP"
_RANK = {PASS: 0, WARNING: 1, ERROR: 2}

BINARY, ABSOLUTE, ULP, THOUSANDTH, BENCHMARK = (
    "binary_consistency", "absolute_threshold", "ulp", "thousandth", "benchmark")
STANDARDS = (BINARY, ABSOLUTE, ULP, THOUSANDTH, BENCHMARK)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")

# Prefixes a dump gives an API name (``Functional.conv2d.0.forward``, ``Mint.add.3.backward``).
_DUMP_PREFIXES = frozenset({
    "aten", "distributed", "functional", "jit", "mint", "mintfunctional", "npu", "primitive", "tensor",
    "torch", "vf", "ops", "nn",
})

_DTYPE_ALIASES = {
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float64": "float64", "double": "float64", "fp64": "float64",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
    "bool": "bool", "bool_": "bool",
}
_COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}


def normalise_dtype(dtype: Any) -> str:
    """A torch (``torch.float16``, ``torch.half``), MindSpore (``Float16``, ``BFloat16``, ``Int32``,
    ``Bool``) or numpy dtype name as one of ``float16 bfloat16 float32 float64 complex64 complex128 int
    bool``, or ``other``."""
    name = str(dtype).strip().lower()
    for prefix in ("torch.", "mindspore.", "mstype.", "numpy.", "np."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[name]
    if name.startswith(("int", "uint", "long", "short", "byte", "char")):
        return "int"
    return "other"


def normalise_api(api: str) -> str:
    """The table key of an API name: the dump prefix and what follows the name (call index,
    direction) dropped, lower case, and a trailing in-place ``_`` removed (``add_`` → ``add``;
    dunders such as ``__iadd__`` are kept and listed as they are)."""
    parts = [p for p in str(api).split(".") if p]
    if len(parts) > 1 and parts[0].lower() in _DUMP_PREFIXES:
        parts = parts[1:]
    name = parts[0].lower() if parts else ""
    if name.endswith("_") and not name.startswith("__") and len(name) > 1:
        name = name[:-1]
    return name


def is_backward(api: str) -> bool:
    """An input gradient's row (``Functional.linear.0.backward.output.1``, ``Mint.add.0.backward``)."""
    return "backward" in str(api).split(".")


@dataclass(frozen=True)
class StandardsTable:
    """The data file read: which standard an API uses and each standard's numbers per dtype."""

    api_standard: Mapping[str, str]
    default_standard: str
    thresholds: Mapping[str, Any]

    def standard_for(self, api: str, dtype: Any = "float32") -> str:
        """The standard an output of ``api`` is judged with; integer and bool outputs always use
        binary consistency, input gradients (``….backward…``) the data file's ``backward_standard``."""
        if normalise_dtype(dtype) in ("int", "bool"):
            return BINARY
        if is_backward(api):
            return self.thresholds.get("backward_standard", {}).get("standard", BENCHMARK)
        return self.api_standard.get(normalise_api(api), self.default_standard)

    def numbers(self, standard: str, dtype: str, api: str = "") -> dict[str, Any]:
        """The per-dtype numbers of ``standard`` (with any per-API override applied)."""
        table = self.thresholds[standard]
        numbers = dict(table[dtype]) if dtype in table else {k: v for k, v in table.items() if k != "_comment"}
        override = self.thresholds.get("overrides", {}).get(normalise_api(api), {}).get(dtype, {})
        numbers.update(override)
        return numbers


def parse_standards(data: Mapping[str, Any]) -> StandardsTable:
    """Check and index the data file's content: every listed standard known, no API under two."""
    apis = data["apis"]
    unknown = set(apis) - set(STANDARDS)
    if unknown or data["default_standard"] not in STANDARDS:
        raise ValueError(f"unknown standard(s) in the data file: {sorted(unknown) or data['default_standard']}")
    backward = data["thresholds"].get("backward_standard", {}).get("standard", BENCHMARK)
    if backward not in STANDARDS:
        raise ValueError(f"unknown backward standard in the data file: {backward!r}")
    api_standard: dict[str, str] = {}
    for standard, names in apis.items():
        for name in names:
            key = normalise_api(name)
            if key in api_standard and api_standard[key] != standard:
                raise ValueError(f"API {name!r} is listed under both {api_standard[key]} and {standard}")
            api_standard[key] = standard
    return StandardsTable(api_standard, data["default_standard"], data["thresholds"])


def load_standards(path: str | Path | None = None) -> StandardsTable:
    """The table from ``path``, or the packaged ``standards.json`` (cached) when None."""
    if path is None:
        return _packaged()
    return parse_standards(json.loads(Path(path).read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _packaged() -> StandardsTable:
    text = resources.files("msprobe.core.run_ut").joinpath("standards.json").read_text(encoding="utf-8")
    return parse_standards(json.loads(text))


@dataclass(frozen=True)
class OutputVerdict:
    """The judgement of one output: status, the standard used, its metrics (float64 numbers, None
    where undefined), a short message, and the first-stage status (None where not computed)."""

    status: str
    standard: str
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    message: str = ""
    stage1: str | None = None


Result = tuple[str, dict[str, Any], str]


def worst(statuses: Iterable[str]) -> str:
    """error > Warning > pass over the given statuses (SKIP ignored; pass for none)."""
    ranked = [s for s in statuses if s in _RANK]
    return max(ranked, key=_RANK.__getitem__) if ranked else PASS


def grade(value: float, warning_above: float, error_above: float) -> str:
    """pass / Warning / error of a metric against its [warning above, error above] pair (NaN: pass)."""
    if value > error_above:
        return ERROR
    if value > warning_above:
        return WARNING
    return PASS


# --- the standards ---------------------------------------------------------------------------------


def binary_consistency(device: np.ndarray, bench: np.ndarray) -> Result:
    """Binary consistency: every element must be identical (NaN matches NaN at the same position).
    Metric ``error_ratio`` = fraction of differing elements; pass when it is 0, else error."""
    d, b = np.asarray(device).ravel(), np.asarray(bench).ravel()
    if d.size == 0:
        return PASS, {"error_ratio": 0.0}, "empty output"
    same = d == b
    if d.dtype.kind in "fc" and b.dtype.kind in "fc":
        same |= np.isnan(d) & np.isnan(b)
    differ = int(d.size - same.sum())
    ratio = differ / d.size
    if differ:
        return ERROR, {"error_ratio": ratio}, f"{differ} of {d.size} elements differ from the bench"
    return PASS, {"error_ratio": 0.0}, ""


def _noise(bench: np.ndarray, numbers: Mapping[str, Any]) -> float:
    """``scale_atol`` × the largest |bench|: an error this small is rounding noise of the output's scale."""
    return numbers.get("scale_atol", 0.0) * (float(np.abs(bench).max()) if bench.size else 0.0)


def absolute_threshold(device: np.ndarray, bench: np.ndarray, numbers: Mapping[str, float]) -> Result:
    """Absolute threshold: an element fails when |b| >= small_value and |d − b|/|b| > rtol (relative
    region) or |b| < small_value and |d − b| > small_value_atol (small-value region), and in both
    cases |d − b| > scale_atol·max|b| (an API rounding twice, ``add`` with ``alpha``, keeps the second
    rounding's error relative to the output's scale when its result cancels). Metrics ``rel_err_ratio``
    and ``abs_err_ratio`` are the failing fractions of all elements; pass when both are 0, else error.
    Numbers (float16/bfloat16/float32): rtol 1e-3/4e-3/1e-6, small_value 1e-3/1e-3/1e-6,
    small_value_atol 1e-3/1e-3/1e-9, scale_atol 1u/1u/16u."""
    rtol, small, atol = numbers["rtol"], numbers["small_value"], numbers["small_value_atol"]
    err = m.abs_errors(device, bench)
    is_small = np.abs(bench) < small
    noisy = err > _noise(bench, numbers)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_fail = ~is_small & (err / np.abs(bench) > rtol) & noisy
    abs_fail = is_small & (err > atol) & noisy
    n = max(device.size, 1)
    found = {"rel_err_ratio": float(rel_fail.sum()) / n, "abs_err_ratio": float(abs_fail.sum()) / n}
    if rel_fail.any() or abs_fail.any():
        return ERROR, found, (f"{int(rel_fail.sum())} elements over rtol {rtol}, {int(abs_fail.sum())} small "
                              f"values over atol {atol}")
    return PASS, found, ""


def ulp_standard(device: np.ndarray, bench: np.ndarray, numbers: Mapping[str, Any],
                 fmt: Mapping[str, int]) -> Result:
    """ULP: ULP error = |d − b| / ulp(b), the ULP taken in the device format (``fmt``). Metrics
    ``mean_ulp_err``, ``max_ulp_err`` and ``ulp_err_over_ratio`` (fraction of elements with ULP
    error > ulp_limit). float32: pass when mean ULP error < 64 or the fraction over 32 ULP is below
    5 %; float16/bfloat16: pass when the fraction over 1 ULP is below 0.1 %. Else error."""
    errs = m.ulp_errors(device, bench, fmt["mantissa_bits"], fmt["min_exponent"])
    mean_err = float(errs.mean()) if errs.size else 0.0
    over = float(np.mean(errs > numbers["ulp_limit"])) if errs.size else 0.0
    found = {"mean_ulp_err": mean_err, "max_ulp_err": float(errs.max()) if errs.size else 0.0,
             "ulp_err_over_ratio": over}
    mean_max = numbers.get("mean_ulp_max")
    ok = over < numbers["max_over_fraction"] or (mean_max is not None and mean_err < mean_max)
    if ok:
        return PASS, found, ""
    rule = f"fraction over {numbers['ulp_limit']} ULP {over:.6g} >= {numbers['max_over_fraction']}"
    if mean_max is not None:
        rule = f"mean ULP error {mean_err:.6g} >= {mean_max} and {rule}"
    return ERROR, found, rule


def thousandth(device: np.ndarray, bench: np.ndarray, numbers: Mapping[str, float]) -> Result:
    """Thousandth (convolutions): metric ``rel_err_thousandth`` = fraction of elements within rtol
    (relative error < rtol, or an absolute error <= scale_atol·max|b|); pass when it is >= min_ratio
    (0.999), else error. rtol is 0.001, 0.004 for bfloat16 (whose rounding alone exceeds 0.001)."""
    if not device.size:
        return PASS, {"rel_err_thousandth": 1.0}, ""
    within = (m.rel_errors(device, bench) < numbers["rtol"]) | (m.abs_errors(device, bench) <= _noise(bench, numbers))
    ratio = float(np.mean(within))
    found = {"rel_err_thousandth": ratio}
    if ratio >= numbers["min_ratio"]:
        return PASS, found, ""
    return ERROR, found, f"only {ratio:.6g} of elements within relative error {numbers['rtol']}"


BENCHMARK_METRICS = ("small_value_err_ratio", "rmse", "max_rel_err", "mean_rel_err", "eb")


def scaled_small_value(bench: np.ndarray, numbers: Mapping[str, Any]) -> tuple[float, float]:
    """The small-value bound and its tolerance for this output: the dtype's ``small_value`` and
    ``small_value_atol``, raised to ``scale_small_value * S`` and ``scale_atol * S`` where S is the
    largest |bench| (a correct kernel cancelling terms of the output's magnitude errs by a few units
    of roundoff of S, whatever the element's own size)."""
    scale = float(np.abs(bench).max()) if bench.size else 0.0
    return (max(numbers["small_value"], numbers.get("scale_small_value", 0.0) * scale),
            max(numbers["small_value_atol"], _noise(bench, numbers)))


def benchmark_metrics(device: np.ndarray, bench: np.ndarray, small_value: float, atol: float) -> dict[str, float]:
    """The benchmark method's numbers of one side against the high-precision bench."""
    dn, bn = m.normal_region(device, bench, small_value)
    rel = m.rel_errors(dn, bn)
    return {
        "small_value_err_ratio": m.small_value_err_ratio(device, bench, small_value, atol),
        "rmse": m.rmse(device, bench),
        "max_rel_err": float(rel.max()) if rel.size else 0.0,
        "mean_rel_err": float(rel.mean()) if rel.size else 0.0,
        "eb": m.error_balance(dn, bn),
    }


def benchmark(device: np.ndarray, bench: np.ndarray, numbers: Mapping[str, Any],
              peer_ratio: Mapping[str, Any], peer: np.ndarray | None = None) -> Result:
    """Benchmark method. Metrics: small-value error ratio (among |b| < small_value, the fraction with
    |d − b| > small_value_atol), RMSE, max and mean relative error and error balance EB
    (|mean((d − b)/|b|)|), the last three over |b| >= small_value. The small-value bound and tolerance
    grow with the output's largest magnitude (:func:`scaled_small_value`); the ones used are in the
    metrics (``small_value``, ``small_value_atol``).

    Without a peer, each metric is graded on its [warning_above, error_above] pair in ``absolute``
    (RMSE as ``rmse_rel`` = RMSE / max(RMS(b), small_value)). With a peer (the same API run in the same
    dtype on the reference device), each is graded as device_metric / peer_metric on ``peer_ratio``
    (small value, RMSE, mean relative error, EB: [1, 2]; max relative error: [1, 10]), a metric under
    its absolute warning bound passing whatever its ratio. The status is the worst metric's."""
    small, atol = scaled_small_value(bench, numbers)
    bounds = numbers["absolute"]
    found: dict[str, Any] = benchmark_metrics(device, bench, small, atol)
    found["small_value"], found["small_value_atol"] = small, atol
    found["rmse_rel"] = found["rmse"] / max(m.rms(bench), numbers["small_value"])
    absolute = {k: found["rmse_rel"] if k == "rmse" else found[k] for k in BENCHMARK_METRICS}
    grades = {k: grade(absolute[k], *bounds[k]) for k in BENCHMARK_METRICS}
    if peer is not None:
        theirs = benchmark_metrics(peer, bench, small, atol)
        for k in BENCHMARK_METRICS:
            ratio = _ratio(found[k], theirs[k])
            found[f"{k}_ratio"] = ratio
            grades[k] = PASS if absolute[k] <= bounds[k][0] else grade(ratio, *peer_ratio[k])
    status = worst(grades.values())
    failing = [f"{k} {grades[k]}" for k in BENCHMARK_METRICS if grades[k] != PASS]
    return status, found, ", ".join(failing)


def _ratio(mine: float, theirs: float) -> float:
    if mine == theirs:
        return 1.0
    return mine / theirs if theirs else math.inf


def stage1(device: np.ndarray, bench: np.ndarray, numbers: Mapping[str, Any], dtype: str) -> Result:
    """First stage: error when the cosine similarity is < 0.99 (where defined); pass when the max
    absolute error is <= 0.001; else pass when the fraction of elements with relative error < rtol is
    >= 1 − rtol (rtol: float16 1e-3, bfloat16 4e-3, float32 1e-4), Warning when the fraction under
    5·rtol is >= 1 − 5·rtol, error otherwise."""
    if device.size == 0:
        return PASS, {}, ""
    cos, _ = cosine(device, bench)
    err = m.abs_errors(device, bench)
    rel = m.rel_errors(device, bench)
    rtol = numbers["rtol"][dtype]
    found = {"cosine": cos, "max_abs_err": float(err.max()), "max_rel_err": float(rel.max()),
             "rel_err_ratio": float(np.mean(rel < rtol)), "rel_err_ratio_5x": float(np.mean(rel < 5 * rtol))}
    if cos is not None and cos < numbers["cosine_min"]:
        return ERROR, found, f"cosine {cos:.6g} < {numbers['cosine_min']}"
    if found["max_abs_err"] <= numbers["max_abs_pass"]:
        return PASS, found, ""
    if found["rel_err_ratio"] >= 1 - rtol:
        return PASS, found, ""
    if found["rel_err_ratio_5x"] >= 1 - 5 * rtol:
        return WARNING, found, f"relative error ratio under {rtol} is {found['rel_err_ratio']:.6g}"
    return ERROR, found, f"relative error ratio under {5 * rtol:g} is {found['rel_err_ratio_5x']:.6g}"


# --- one output, one API ------------------------------------------------------------------------------


# A gradient whose exact value is zero (docs/run_ut.md#gradients-that-cancel-to-zero): the device may differ from
# the bench by CANCELLED_SLACK units of the device dtype's roundoff times the incoming gradient's norm (the rounding
# its inputs already carry), and the bench counts as zero where zero itself is that close to it. Measured on the
# zoo's ViT and BERT key biases (30 seeds; seed 0 also on AVX2 and plain kernels): the bench 0.6 to 10.2 units,
# the device's distance 0.3 to 1.2; every gradient that is not zero is above 100,000 units.
CANCELLED_SLACK = 16.0


def cancelled_to_zero(device: np.ndarray, bench: np.ndarray, unit_scale: float) -> Result | None:
    """A gradient whose exact value is zero (the bias of softmax's keys: shifting every score of a row
    changes nothing) is the rounding its inputs carry, summed, on both sides: cosine similarity and relative
    errors of that noise say nothing. When the bench is within :data:`CANCELLED_SLACK` of ``unit_scale`` (the
    device dtype's unit roundoff times the incoming gradient's norm) — zero itself would pass against it, so
    the bench cannot tell the exact value from its noise — the device passes if its distance to the bench is
    within that slack too, else it is an error; None when the bench is larger (judged as usual)."""
    floor = CANCELLED_SLACK * unit_scale
    if not unit_scale > 0 or float(np.linalg.norm(bench)) > floor:
        return None
    distance = float(np.linalg.norm(device - bench))
    found = {"cancelled_floor": floor, "cancelled_distance": distance}
    if distance <= floor:
        return PASS, found, ""
    return ERROR, found, (f"the exact gradient is zero (the bench is the rounding its inputs carry) but the "
                          f"device's is {distance:.3g} from it, over {floor:.3g}")


def _as_real(array: np.ndarray) -> np.ndarray:
    return np.stack([array.real, array.imag], axis=-1) if np.iscomplexobj(array) else array


def judge_output(api: str, dtype: Any, device: Any, bench: Any, *, peer: Any = None,
                 table: StandardsTable | None = None, gradient_scale: float | None = None) -> OutputVerdict:
    """Judge one output of ``api`` run on the device in ``dtype`` against the high-precision ``bench``.

    ``device`` is the device output as float64 (integers and bools as they are), ``bench`` the
    benchmark output (float32 for float16/bfloat16 runs, float64 for float32 runs), ``peer`` optionally
    the same API run in ``dtype`` on the reference device (used by the benchmark method). Shapes must
    match and inf/nan must sit at the same positions with the same signs, else error; an empty output
    passes; a None or non-numeric output is SKIP. ``gradient_scale`` (an input gradient: the largest L2 norm
    among the output gradients it was computed from) lets :func:`cancelled_to_zero` judge a gradient whose
    exact value is zero."""
    table = table or load_standards()
    name = normalise_dtype(dtype)
    if device is None or bench is None:
        return OutputVerdict(SKIP, "", message="no device or bench output")
    d, b = np.asarray(device), np.asarray(bench)
    if d.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        return OutputVerdict(SKIP, "", message=f"not a numeric output ({d.dtype}, {b.dtype})")
    if d.dtype.kind in "biu":  # an integer or bool output, whatever dtype the API ran in
        name = "bool" if d.dtype.kind == "b" else "int"
    standard = table.standard_for(api, name)
    if d.shape != b.shape:
        return OutputVerdict(ERROR, standard, message=f"shape mismatch: device {list(d.shape)}, bench {list(b.shape)}")
    if d.size == 0:
        return OutputVerdict(PASS, standard, message="empty output")
    if standard == BINARY:
        status, found, msg = binary_consistency(d, b)
        return OutputVerdict(status, standard, found, msg)
    part = _COMPLEX_PART.get(name, name)
    if part not in FLOAT_DTYPES:
        return OutputVerdict(SKIP, standard, message=f"no thresholds for dtype {dtype}")
    if peer is not None:
        peer = _as_real(np.asarray(peer)).astype(np.float64).ravel()
        if peer.size != d.size:
            return OutputVerdict(ERROR, standard, message="peer output shape differs from the device output")
    fd, fb, mismatches = m.finite_pairs(_as_real(d), _as_real(b))
    if mismatches:
        return OutputVerdict(ERROR, standard, {"nonfinite_mismatch": float(mismatches)},
                             f"inf/nan positions or signs differ from the bench at {mismatches} of {d.size} elements")
    if peer is not None:
        peer = peer[np.isfinite(_as_real(d).astype(np.float64).ravel()) & np.isfinite(_as_real(b).ravel())]
    if fd.size == 0:
        return OutputVerdict(PASS, standard, message="every element is inf/nan, the same on both sides")
    if gradient_scale is not None and part in UNITS:
        cancelled = cancelled_to_zero(fd, fb, UNITS[part] * gradient_scale)
        if cancelled is not None:
            return OutputVerdict(cancelled[0], standard, cancelled[1], cancelled[2])
    numbers = table.numbers
    if standard == ABSOLUTE:
        status, found, msg = absolute_threshold(fd, fb, numbers(ABSOLUTE, part, api))
    elif standard == ULP:
        fmt = table.thresholds["formats"][part]
        status, found, msg = ulp_standard(fd, fb, numbers(ULP, part, api), fmt)
    elif standard == THOUSANDTH:
        status, found, msg = thousandth(fd, fb, numbers(THOUSANDTH, part, api))
    else:
        peer_ok = peer if peer is not None and np.isfinite(peer).all() else None
        status, found, msg = benchmark(fd, fb, numbers(BENCHMARK, part, api),
                                       table.thresholds[BENCHMARK]["peer_ratio"], peer_ok)
    first, first_found, first_msg = stage1(fd, fb, table.thresholds["stage1"], part)
    found.update({f"stage1_{k}": v for k, v in first_found.items()})
    if first != PASS:
        msg = "; ".join(x for x in (msg, f"stage 1 {first}: {first_msg}") if x)
    return OutputVerdict(status, standard, found, msg, first)


# Every number the details CSV holds for a float output, whatever the standard of its API (msprobe
# 1.1.1's stage 2 and other readers pick the numbers of their own standard).
RATIO_THRESHOLDS = {"hundredth": 0.01, "thousandth": 0.001, "ten_thousandth": 0.0001}


def all_metrics(api: str, dtype: Any, device: Any, bench: Any, table: StandardsTable | None = None) -> dict[str, float]:
    """The numbers of every standard for one output (``device``/``bench`` as :func:`judge_output` takes
    them): ``error_ratio`` (binary consistency; the only one for integer/bool outputs), and for float
    outputs ``inf_nan_err_ratio`` (share of inf/nan mismatches), ``rel_err_ratio``/``abs_err_ratio``
    (absolute threshold), ``max_ulp_err``/``mean_ulp_err``/``ulp_err_over_ratio`` (ULP),
    ``small_value_err_ratio``/``rmse``/``max_rel_err``/``mean_rel_err``/``eb`` (benchmark method) and
    ``hundredth``/``thousandth``/``ten_thousandth`` (share of elements with relative error under 1 %,
    0.1 %, 0.01 %); each with the dtype's numbers, over the elements finite on both sides. Empty when
    the output cannot be judged (None, non-numeric, shapes differ, empty, a dtype without numbers)."""
    table = table or load_standards()
    if device is None or bench is None:
        return {}
    d, b = np.asarray(device), np.asarray(bench)
    if d.dtype.kind not in "biufc" or b.dtype.kind not in "biufc" or d.shape != b.shape or d.size == 0:
        return {}
    found = dict(binary_consistency(d, b)[1])
    part = _COMPLEX_PART.get(normalise_dtype(dtype), normalise_dtype(dtype))
    if d.dtype.kind in "biu" or part not in FLOAT_DTYPES:
        return found
    dr, br = _as_real(d), _as_real(b)
    fd, fb, mismatches = m.finite_pairs(dr, br)
    found["inf_nan_err_ratio"] = mismatches / dr.size
    found.update(absolute_threshold(fd, fb, table.numbers(ABSOLUTE, part, api))[1])
    found.update(ulp_standard(fd, fb, table.numbers(ULP, part, api), table.thresholds["formats"][part])[1])
    numbers = table.numbers(BENCHMARK, part, api)
    found.update(benchmark_metrics(fd, fb, *scaled_small_value(fb, numbers)))
    rel = m.rel_errors(fd, fb)
    for key, bound in RATIO_THRESHOLDS.items():
        found[key] = float(np.mean(rel < bound)) if rel.size else 1.0
    return found


def api_status(verdicts: Iterable[OutputVerdict | str]) -> str:
    """An API's status from its outputs': error if any is error, else Warning if any is Warning, else
    pass; SKIP when every output was skipped (or there are none)."""
    statuses = [v if isinstance(v, str) else v.status for v in verdicts]
    if all(s == SKIP for s in statuses):
        return SKIP
    return worst(statuses)
