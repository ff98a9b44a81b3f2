"""The free benchmark collector: re-run each selected API on perturbed inputs and judge it (SPEC 7).

Framework-free: what a perturbation is, how an API re-runs without touching the user's autograd graph
or random streams, and how a gradient is recomputed are the framework's :class:`BenchmarkOps`; which
calls to check, how to compare, what to write and when are decided here once.

``check`` appends one CSV row per API output whose ``max_rel`` exceeds its threshold to
``{dump_path}/free_benchmark.csv`` at the end of each step (safe across ranks). ``fix`` gives the user
the perturbed (more precise) output, cast back, instead of the original.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from msprobe.core.events import Call
from msprobe.core.fileio import append_csv_rows, make_dir
from msprobe.core.free_benchmark.compare import dtype_threshold, max_relative_error
from msprobe.core.free_benchmark.preheat import Thresholds
from msprobe.core.log import logger
from msprobe.core.naming import parse_name
from msprobe.core.select import Selector

CSV_FILE = "free_benchmark.csv"
CSV_COLUMNS = ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index")
_STATE = "msprobe.free_benchmark"


class Skip(str):
    """Why a call cannot be perturbed in this mode (returned by :meth:`BenchmarkOps.perturb`)."""


class BenchmarkOps(Protocol):
    """What a framework supplies to the free benchmark."""

    def is_tensor(self, value: Any) -> bool: ...

    def perturb(self, mode: str, args: tuple, kwargs: dict) -> tuple[tuple, dict] | Skip:
        """Perturbed copies of the arguments (the originals untouched), or why this call cannot take it."""

    def before_call(self) -> Any:
        """State to re-run under the same conditions as the original call (random number state)."""

    def rerun(self, call: Call, args: tuple, kwargs: dict, state: Any, *, differentiable: bool) -> Any:
        """``call.rerun`` under ``state``; the user's random streams are as before it afterwards.
        ``differentiable=False``: detached from autograd."""

    def float_outputs(self, output: Any) -> list[tuple[int, Any]]:
        """``(index among the output's tensors, tensor)`` for every floating-point tensor."""

    def as_float64(self, tensor: Any) -> np.ndarray: ...

    def dtype_key(self, tensor: Any) -> str:
        """``float16``, ``bfloat16``, ``float32``... (the threshold table's keys)."""

    def describe(self, tensor: Any) -> tuple[str, tuple[int, ...]]:
        """dtype as the dump writes it, and shape (the CSV's ``dtype`` and ``shape``)."""

    def fixed(self, output: Any, perturbed: Any) -> Any:
        """``perturbed`` cast back to the dtype and device of ``output``, same structure."""

    def save_for_backward(self, args: tuple, kwargs: dict) -> Any:
        """Inputs kept, detached, for recomputing gradients in the backward pass."""

    def input_gradients(self, call: Call, saved: Any, mode: str, state: Any, grad_input: tuple) -> list | Skip:
        """Gradients of the call's tensor inputs (argument order, ``None`` where none) when it runs on
        perturbed inputs and ``grad_input`` flows into its outputs."""


class FreeBenchmarkCollector:
    """A step collector (:class:`~msprobe.core.events.StepCollector`) for task ``free_benchmark``."""

    def __init__(
        self,
        *,
        dump_path: str,
        selector: Selector,
        ops: BenchmarkOps,
        pert_mode: str = "improve_precision",
        handler_type: str = "check",
        fuzz_stage: str = "forward",
        thresholds: Thresholds | None = None,
    ) -> None:
        if handler_type not in ("check", "fix"):
            raise ValueError(f"handler_type {handler_type!r}: give 'check' or 'fix'")
        if fuzz_stage not in ("forward", "backward"):
            raise ValueError(f"fuzz_stage {fuzz_stage!r}: give 'forward' or 'backward'")
        self.dump_path = dump_path
        self.selector = selector
        self.ops = ops
        self.pert_mode, self.handler_type, self.fuzz_stage = pert_mode, handler_type, fuzz_stage
        self.thresholds = thresholds or Thresholds()
        self.csv_path = Path(dump_path) / CSV_FILE
        self._rows: list[list] = []
        self._step = 0
        self._rank: int | None = None
        self._active = False
        self._skips_logged: set[str] = set()

    # ------------------------------------------------------------------ step lifecycle
    @property
    def active(self) -> bool:
        return self._active

    @property
    def exhausted(self) -> bool:
        return False

    def begin_step(self, step: int, rank: int | None) -> None:
        self.end_step()
        self.selector.reset()
        self._step, self._rank, self._active = step, rank, True

    def end_step(self) -> None:
        if self._rows:
            make_dir(self.dump_path)
            append_csv_rows(self.csv_path, CSV_COLUMNS, self._rows)
            logger.info(f"free benchmark: {len(self._rows)} unstable API output(s) written to {self.csv_path}")
            self._rows.clear()
        self._active = False

    # ------------------------------------------------------------------ CallSink
    def forward_start(self, call: Call) -> bool:
        if call.is_module or call.rerun is None or not self.selector.begin(call.name):
            return False
        if call.mutates_inputs:
            self._skip(call.name, Skip("it writes into its inputs"))
            return False
        if not self.thresholds.wants(_kind(call.name), self._step):
            return False
        call.extra[_STATE] = self.ops.before_call()
        return self.fuzz_stage == "backward"

    def forward_end(self, call: Call, output: Any) -> Any:
        if _STATE not in call.extra:
            return None
        if self.fuzz_stage == "backward":
            call.extra[_STATE] = (call.extra[_STATE], self.ops.save_for_backward(call.args, call.kwargs))
            return None
        state = call.extra.pop(_STATE)
        perturbed_args = self.ops.perturb(self.pert_mode, call.args, call.kwargs)
        if isinstance(perturbed_args, Skip):
            self._skip(call.name, perturbed_args)
            return None
        fix = self.handler_type == "fix"
        perturbed = self.ops.rerun(call, *perturbed_args, state, differentiable=fix)
        if fix:
            return self.ops.fixed(output, perturbed)
        self._judge(call, "forward", self.ops.float_outputs(output), self.ops.float_outputs(perturbed),
                    single=self.ops.is_tensor(output))
        return None

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        if _STATE not in call.extra or not self._active:
            return
        state, saved = call.extra.pop(_STATE)
        grads = self.ops.input_gradients(call, saved, self.pert_mode, state, grad_input)
        if isinstance(grads, Skip):
            self._skip(call.name, grads)
            return
        original = [(i, g) for i, g in enumerate(grad_output) if g is not None]
        perturbed = [(i, g) for i, g in enumerate(grads) if g is not None]
        self._judge(call, "backward", original, perturbed, single=len(grad_output) == 1)

    # ------------------------------------------------------------------ internals
    def _judge(self, call: Call, stage: str, original: list, perturbed: list, *, single: bool) -> None:
        """Rows for the outputs beyond their threshold. The threshold is the coarsest dtype's among
        the output and the call's float inputs: a float16 input moved by one of its ulps moves a
        float32 output (``.float()``) by far more than a float32 ulp."""
        name = call.name
        kind = _kind(name)
        others = dict(perturbed)
        input_dtypes = {self.ops.dtype_key(t) for _, t in self.ops.float_outputs((call.args, call.kwargs))}
        for index, tensor in original:
            if index not in others:
                continue
            max_rel = max_relative_error(self.ops.as_float64(tensor), self.ops.as_float64(others[index]))
            dtype = max({self.ops.dtype_key(tensor), *input_dtypes}, key=dtype_threshold)
            self.thresholds.observe(kind, dtype, max_rel, self._step)
            if max_rel <= self.thresholds.threshold(kind, dtype, self._step):
                continue
            dtype_label, shape = self.ops.describe(tensor)
            self._rows.append([
                "" if self._rank is None else self._rank, self.pert_mode, stage, self._step,
                _csv_api_name(name), _format_rel(max_rel), dtype_label, str(tuple(shape)),
                "" if single else index,
            ])

    def _skip(self, name: str, reason: Skip) -> None:
        kind = _kind(name)
        if kind not in self._skips_logged:
            self._skips_logged.add(kind)
            logger.info(f"free benchmark skips {kind} with pert_mode {self.pert_mode}: {reason}")


def _kind(name: str) -> str:
    entry = parse_name(name)
    return f"{entry.prefix}.{entry.api}"


def _csv_api_name(name: str) -> str:
    """``Tensor.__add__.0`` for ``Tensor.__add__.0.forward``: the stage has its own column."""
    entry = parse_name(name)
    return f"{entry.prefix}.{entry.api}.{entry.count}"


def _format_rel(value: float) -> float | str:
    return "inf" if math.isinf(value) else value
