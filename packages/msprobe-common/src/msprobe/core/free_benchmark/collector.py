"""The free benchmark collector: re-run each selected API on perturbed inputs and judge it (docs/free_benchmark.md).

Framework-free: what a perturbation is, how an API re-runs without touching the user's autograd graph
or random streams, and how a gradient is recomputed are the framework's :class:`BenchmarkOps`; which
calls to check, how to compare, what to write and when are decided here once.

``check`` appends one CSV row per API output whose ``max_rel`` exceeds its threshold to
``{dump_path}/free_benchmark.csv`` at the end of each step (safe across ranks). ``fix`` gives the user
the perturbed (more precise) output, cast back, instead of the original.
"""

from __future__ import annotations

import csv
import math
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe.core.contract import Call
from msprobe.core.services.fileio import append_csv_rows, make_dir
from msprobe.core.free_benchmark.compare import dtype_threshold, max_relative_error
from msprobe.core.free_benchmark.ops import BenchmarkOps, Skip
from msprobe.core.free_benchmark.preheat import Thresholds
from msprobe.core.services.log import logger
from msprobe.core.lifecycle.naming import parse_name
from msprobe.core.lifecycle.select import Selector

CSV_FILE = "free_benchmark.csv"
CSV_COLUMNS = ("rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index")


def read_rows(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a ``free_benchmark.csv`` as ``{column: text}`` (none when the file does not exist);
    ``ValueError`` when its header is not :data:`CSV_COLUMNS`."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = tuple(next(reader, ()))
        if header != CSV_COLUMNS:
            raise ValueError(f"{path}: header {header!r} is not free benchmark's {CSV_COLUMNS!r}")
        return [dict(zip(CSV_COLUMNS, row)) for row in reader]


@dataclass
class _Pending:
    """What the collector keeps of one selected call between its forward and its end (the forward's
    end, or under ``fuzz_stage: backward`` its backward)."""

    call: weakref.ref  # the call itself, weakly: its id may be reused once it is gone
    random_state: Any  # BenchmarkOps.before_call(), taken before the original call ran
    saved: Any = None  # BenchmarkOps.save_for_backward(), once the forward has ended (backward stage)


class FreeBenchmarkCollector:
    """A step collector (:class:`~msprobe.core.contract.StepCollector`) for task ``free_benchmark``."""

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
        # id(call) → what is kept of a selected call until it is done; emptied at every step boundary,
        # and an entry goes with its call when the call is gone (a backward that never came).
        self._pending: dict[int, _Pending] = {}

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
        self._pending.clear()  # a call of this step is never judged in another
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
        self._keep(call)
        return self.fuzz_stage == "backward"

    def forward_end(self, call: Call, output: Any) -> Any:
        if self.fuzz_stage == "backward":
            pending = self._kept(call)
            if pending is not None:
                pending.saved = self.ops.save_for_backward(call.args, call.kwargs)
            return None
        pending = self._kept(call, done=True)
        if pending is None:
            return None
        perturbed_args = self.ops.perturb(self.pert_mode, call.args, call.kwargs)
        if isinstance(perturbed_args, Skip):
            self._skip(call.name, perturbed_args)
            return None
        fix = self.handler_type == "fix"
        perturbed = self.ops.rerun(call, *perturbed_args, pending.random_state, differentiable=fix)
        if fix:
            return self.ops.fixed(output, perturbed)
        self._judge(call.name, (call.args, call.kwargs), "forward", self.ops.float_outputs(output),
                    self.ops.float_outputs(perturbed), single=self.ops.is_tensor(output))
        return None

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        pending = self._kept(call, done=True)
        if pending is None or pending.saved is None or not self._active:
            return
        grads = self.ops.input_gradients(call, pending.saved, self.pert_mode, pending.random_state, grad_input)
        if isinstance(grads, Skip):
            self._skip(call.name, grads)
            return
        original = [(i, g) for i, g in enumerate(grad_output) if g is not None]
        perturbed = [(i, g) for i, g in enumerate(grads) if g is not None]
        self._judge(call.name, pending.saved, "backward", original, perturbed, single=len(grad_output) == 1)

    # ------------------------------------------------------------------ per-call state
    def _keep(self, call: Call) -> None:
        """Remember ``call`` with the random state it starts from."""
        key, pending = id(call), self._pending

        def gone(ref: weakref.ref) -> None:  # the call was freed before it was done
            entry = pending.get(key)
            if entry is not None and entry.call is ref:
                pending.pop(key, None)

        pending[key] = _Pending(weakref.ref(call, gone), self.ops.before_call())

    def _kept(self, call: Call, *, done: bool = False) -> _Pending | None:
        """What was kept of this very call (``None`` if nothing); ``done``: forget it."""
        pending = self._pending.get(id(call))
        if pending is None or pending.call() is not call:
            return None
        if done:
            del self._pending[id(call)]
        return pending

    # ------------------------------------------------------------------ internals
    def _judge(self, name: str, inputs: tuple, stage: str, original: list, perturbed: list, *, single: bool) -> None:
        """Rows for the outputs beyond their threshold. The threshold is the coarsest dtype's among
        the output and the call's float ``inputs`` (its ``(args, kwargs)``, or their saved copies): a
        float16 input moved by one of its ulps moves a float32 output (``.float()``) by far more than a
        float32 ulp."""
        kind = _kind(name)
        others = dict(perturbed)
        input_dtypes = {self.ops.dtype_key(t) for _, t in self.ops.float_outputs(inputs)}
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
