"""Overflow check (docs/overflow_check.md): find the calls whose outputs hold inf or NaN, and which of them started it.

A non-finite value spreads: every call that receives it tends to pass it on, so "every call whose
output is not finite" (what msprobe 1.1.1 reports) buries the one call where it began. Each hit is
therefore classified: **origin** when every input of the call was finite (this call produced the
inf/NaN), **inherited** when an input already held one. For a backward entry the inputs are the
gradients flowing into the call and the outputs those it produced for its inputs.

Only hits are written, with their tensors and stack, in the usual dump layout; the classification of
each goes to ``overflow.json`` next to ``dump.json`` (``{entry: "origin" | "inherited"}`` in the order
found) and to the log, where the first origin is named. After ``overflow_nums`` hits (-1: never) the
collector stops collecting for the rest of the run.
"""

from __future__ import annotations

import math
from typing import Any

from msprobe.core.dump.collector import CallState, Parts
from msprobe.core.dump.json_files import write_json_atomic
from msprobe.core.contract import TensorStats
from msprobe.core.contract import Call, TensorAdapter
from msprobe.core.services.log import logger
from msprobe.core.lifecycle.naming import backward_name
from msprobe.core.lifecycle.select import Selector
from msprobe.core.services.tree import map_tensors, tensors_in

ORIGIN, INHERITED = "origin", "inherited"
OVERFLOW_FILE = "overflow.json"
NEVER_STOP = -1


def shows_overflow(stats: TensorStats) -> bool:
    """True when the tensor holds inf or NaN: its max or min is then not finite (NaN propagates
    through both reductions; bool and empty tensors never overflow)."""
    return any(isinstance(v, float) and not math.isfinite(v) for v in (stats.max, stats.min))


def classify(inputs_finite: bool) -> str:
    """An overflowing call is its origin when it received only finite values."""
    return ORIGIN if inputs_finite else INHERITED


class OverflowLog:
    """The hits of a run in order, the first origin, and the ``overflow_nums`` budget."""

    def __init__(self, overflow_nums: int) -> None:
        if isinstance(overflow_nums, bool) or not isinstance(overflow_nums, int) or not (
            overflow_nums >= 1 or overflow_nums == NEVER_STOP
        ):
            raise ValueError(f"overflow_nums {overflow_nums!r}: give an integer >= 1, or -1 (never stop)")
        self.overflow_nums = overflow_nums
        self.hits: list[tuple[str, str]] = []
        self.first_origin: str | None = None

    @property
    def exhausted(self) -> bool:
        return self.overflow_nums != NEVER_STOP and len(self.hits) >= self.overflow_nums

    def record(self, name: str, kind: str) -> None:
        self.hits.append((name, kind))
        if kind == ORIGIN and self.first_origin is None:
            self.first_origin = name
            logger.warning(f"overflow: {name} is the first origin of inf/NaN (its inputs were finite)")
        else:
            logger.info(f"overflow: {name} ({kind})")
        if self.exhausted:
            logger.info(
                f"overflow_nums={self.overflow_nums} reached after {name}: overflow check stops collecting"
            )


class OverflowCollector:
    """Task ``overflow_check``: keeps an entry only when an output is not finite, with its tensor files,
    its stack and its classification; stops collecting after ``overflow_nums`` hits.

    A keep-policy over the collector :class:`~msprobe.core.dump.collector.Parts`: whether a call is kept is
    known only after its outputs are checked, so nothing is encoded before then. Inputs are kept
    unencoded until the call returns (snapshots for in-place APIs, so they are recorded as they were).
    """

    def __init__(
        self,
        *,
        level: str,
        framework: str,
        dump_path: str,
        selector: Selector,
        adapter: TensorAdapter,
        overflow_nums: int,
    ) -> None:
        self.selector = selector
        self.adapter = adapter
        self.parts = Parts(
            task="overflow_check", level=level, framework=framework, dump_path=dump_path,
            selector=selector, adapter=adapter, with_tensors=True,
        )
        self.log = OverflowLog(overflow_nums)
        self._step_kinds: dict[str, str] = {}
        self._inputs: CallState[tuple[tuple, dict]] = CallState("overflow inputs")

    # ------------------------------------------------------------------ step lifecycle
    @property
    def active(self) -> bool:
        return self.parts.output.active

    @property
    def exhausted(self) -> bool:
        return self.log.exhausted

    def begin_step(self, step: int, rank: int | None) -> None:
        self.parts.begin_step(step, rank)
        self._step_kinds = {}

    def end_step(self) -> None:
        if self.parts.output.active and self._step_kinds:
            write_json_atomic(self.parts.output.directory / OVERFLOW_FILE, self._step_kinds)
        self.parts.end_step()

    def abort(self) -> None:
        self.parts.abort()

    # ------------------------------------------------------------------ CallSink
    def forward_start(self, call: Call) -> bool:
        if self.exhausted or not self.parts.spans.enter(call):
            return False
        self._inputs.put(call, (
            map_tensors((call.args, call.kwargs), self.adapter.is_tensor, self.adapter.snapshot)
            if call.mutates_inputs else (call.args, call.kwargs)
        ))
        return True

    def forward_end(self, call: Call, output: Any) -> None:
        spans, encode = self.parts.spans, self.parts.entries.encode
        spans.leave(call)
        inputs = self._inputs.take(call)
        if inputs is None or self.exhausted or not self._overflows(output):
            return
        args, kwargs = inputs
        entry = {
            "input_args": encode(args, call.name, "input"),
            "input_kwargs": encode(kwargs, call.name, "kwargs"),
            "output": encode(output, call.name, "output", as_list=True),
        }
        self._hit(call.name, entry, not self._overflows(inputs), spans.parent(call.name))

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        if not self.parts.output.active or self.exhausted or not self.selector.begin(name):
            return
        if not self._overflows(grad_output):
            return
        encode = self.parts.entries.encode
        entry = {"input": encode(tuple(grad_input), name, "input"),
                 "output": encode(tuple(grad_output), name, "output")}
        self._hit(name, entry, not self._overflows(grad_input), self.parts.spans.backward_parent(call.name))

    # ------------------------------------------------------------------ internals
    def _overflows(self, value: Any) -> bool:
        """Checked at once, one host transfer per call: whether to keep the call decides everything else."""
        tensors = tensors_in(value, self.adapter.is_tensor)
        if not tensors:
            return False
        stats = self.adapter.fetch([self.adapter.stats(t) for t in tensors])
        return any(shows_overflow(s) for s in stats)

    def _hit(self, name: str, entry: dict, inputs_finite: bool, parent: str | None) -> None:
        kind = classify(inputs_finite)
        self.parts.output.add_stack(name)
        self.parts.keep(name, entry, parent)
        self._step_kinds[name] = kind
        self.log.record(name, kind)
        self.parts.flush()
