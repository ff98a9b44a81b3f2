"""``cc_distribution``: statistics of the tensors passed to torch.distributed's collectives.

While the key is on, the collectives of ``torch.distributed`` (the dump's list, ``COLLECTIVES`` of
``msprobe.pytorch.hooks.distributed``) are replaced by wrappers that call the original and, in a monitored
step, queue the reductions of the tensors it was given (group ``cc``), as upstream's monitor does. A
call's rows are named ``{op}.{n}.post`` (``_0``, ``_1``... for several tensor arguments; a list of tensors
is one tensor, its elements concatenated), ``n`` counting that op's calls in the step; with
``cc_pre_hook`` the same tensors before the call too (``{op}.{n}.pre``). An asynchronous call returns the
dump's ``WaitedWork``: its ``post`` rows are measured when its ``wait()`` returns, the result being
undefined before. ``cc_codeline`` keeps only the calls whose call stack matches one of its regular
expressions; ``cc_log_only`` records only each op's call stacks (``cc_stacks.json``). Collectives issued
from C++ (DDP's bucketed gradient all-reduce) do not pass through these functions and are not seen. The
wrappers only read: the collective's arguments and result are untouched.
"""

from __future__ import annotations

import functools
import re
import traceback
from collections import defaultdict

import torch
import torch.distributed as dist

from msprobe.core.monitor.collector import StepCollector, labelled
from msprobe.core.monitor.config import CcConfig
from msprobe.core.monitor.records import CC
from msprobe.core.services.handles import Handle, patch_attributes
from msprobe.pytorch.hooks.distributed import COLLECTIVES, WaitedWork
from msprobe.pytorch.monitor.stats import measurable

CC_STACKS_FILE = "cc_stacks.json"


@torch.no_grad()
def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The measurable tensor arguments, a list of tensors as one (its elements flattened and concatenated)."""
    found = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
            value = torch.cat([v.detach().reshape(-1) for v in value])
        if measurable(value):
            found.append(value)
    return found


def _call_stack() -> str:
    """The caller's frames, outermost first, as upstream writes them (``path[line]   function``), this
    module's own left out."""
    return ";".join(f"{frame.filename}[{frame.lineno}]   {frame.name}" for frame in traceback.extract_stack()
                    if frame.filename != __file__)


class CollectiveWatch:
    """Wraps torch.distributed's collectives while monitoring is on."""

    def __init__(self, collector_of, cc: CcConfig) -> None:
        self.collector_of, self.cc = collector_of, cc
        self.patterns = [re.compile(pattern) for pattern in cc.codeline]
        self.calls: dict[str, int] = defaultdict(int)
        self.calls_in: StepCollector | None = None  # the collector the call counts belong to
        self.stacks: dict[str, set[str]] = defaultdict(set)

    def install(self) -> Handle:
        """Wrap the collectives of ``torch.distributed`` (the dump's list); the handle puts the originals back."""
        found = [(name, getattr(dist, name, None)) for name in COLLECTIVES]
        return patch_attributes([(dist, name, self._wrap(name, original))
                                 for name, original in found if original is not None])

    def _wrap(self, name: str, original):
        @functools.wraps(original)
        def collective(*args, **kwargs):
            collector = self.collector_of()
            if collector is None:
                return original(*args, **kwargs)
            label = self._observe_before(collector, name, args, kwargs)
            result = original(*args, **kwargs)
            if label is None:
                return result
            if isinstance(result, dist.Work):  # the result is defined when the user's wait() returns
                return WaitedWork(result, lambda: self._observe_after(collector, label, args, kwargs))
            self._observe_after(collector, label, args, kwargs)
            return result

        return collective

    def _observe_before(self, collector: StepCollector, name: str, args: tuple, kwargs: dict) -> str | None:
        """The call's label when its tensors are measured; the ``pre`` rows, or the stack under cc_log_only."""
        try:
            if self.patterns or self.cc.log_only:
                stack = _call_stack()
                if self.cc.log_only:
                    self.stacks[name].add(stack)
                    return None
                if not any(pattern.search(stack) for pattern in self.patterns):
                    return None
            if self.calls_in is not collector:
                self.calls, self.calls_in = defaultdict(int), collector
            label = f"{name}.{self.calls[name]}"
            self.calls[name] += 1
            if self.cc.pre_hook:
                collector.add(CC, labelled(label, "pre", _tensors(args, kwargs)), None)
            return label
        except Exception as error:  # the collective runs regardless
            collector.guard(CC, error)
            return None

    def _observe_after(self, collector: StepCollector, label: str, args: tuple, kwargs: dict) -> None:
        if collector is not self.collector_of():
            return  # an asynchronous call waited on after its step ended
        try:
            collector.add(CC, labelled(label, "post", _tensors(args, kwargs)), None, reuse=False)
        except Exception as error:
            collector.guard(CC, error)

    def stacks_by_op(self) -> dict[str, list[list[str]]]:
        """cc_log_only's record, as upstream prints it: each op's distinct call stacks, frame by frame."""
        return {name: [stack.split(";") for stack in sorted(stacks)] for name, stacks in sorted(self.stacks.items())}
