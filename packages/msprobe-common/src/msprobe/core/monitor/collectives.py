"""``cc_distribution``, framework-free: which collective calls of a monitored step are measured, and their names.

While the key is on, a framework's collectives are replaced by wrappers that call the original and, in a
monitored step, queue the reductions of the tensors the call was given or made (group ``cc``), as
upstream's monitor does. A call's rows are named ``{op}.{n}.post`` (``_0``, ``_1``... for several tensors),
``n`` counting that op's calls in the step, so the same call has the same name every step; with
``cc_pre_hook`` its tensors before the call too (``{op}.{n}.pre``). ``cc_codeline`` keeps only the calls
whose call stack matches one of its regular expressions; ``cc_log_only`` records only each op's call stacks
(``cc_stacks.json``). The wrappers only read: a collective's arguments and result are untouched.

What differs between frameworks is behind :class:`CollectiveApi`: the functions to wrap, the tensors of a
call, and when a call's result is defined (at once, or when an asynchronous handle is waited on). Which of a
call's values are its tensors is one walk for both (:func:`call_tensors`), given the framework's tests and cat.
"""

from __future__ import annotations

import functools
import json
import re
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from msprobe.core.monitor.collector import StepCollector, labelled
from msprobe.core.monitor.config import CcConfig
from msprobe.core.monitor.records import CC
from msprobe.core.services.fileio import atomic_write_text
from msprobe.core.services.handles import Handle, patch_attributes

CC_STACKS_FILE = "cc_stacks.json"


def call_tensors(values: Iterable, is_tensor: Callable[[Any], bool], concat: Callable[[list], Any],
                 measurable: Callable[[Any], bool]) -> list:
    """The measurable tensors among a call's ``values``, a list or tuple of tensors (``is_tensor`` of each) as
    one: ``concat`` flattens its elements and concatenates them, since a collective on a list of tensors (an
    all-gather's outputs, a reduce-scatter's inputs) moves them as one buffer."""
    found = []
    for value in values:
        if isinstance(value, (list, tuple)) and value and all(is_tensor(v) for v in value):
            value = concat(value)
        if measurable(value):
            found.append(value)
    return found


class CollectiveApi(Protocol):
    """A framework's collectives, as :class:`CollectiveWatch` needs them."""

    files: tuple[str, ...]  # the adapter's source files, left out of the call stacks written

    def targets(self) -> list[tuple[Any, str]]:
        """``(owner, name)`` of every collective function to wrap."""

    def tensors(self, args: tuple, kwargs: dict) -> list:
        """The measurable tensors a call was given (a list of tensors as one)."""

    def after(self, result: Any, args: tuple, kwargs: dict, measure: Callable[[list], None]) -> Any:
        """Hand ``measure`` the call's result tensors when they are defined (now, or when the user waits on
        the call's asynchronous handle) and return the result the caller gets."""


class CollectiveWatch:
    """Wraps a framework's collectives while monitoring is on."""

    def __init__(self, collector_of: Callable[[], StepCollector | None], cc: CcConfig, api: CollectiveApi) -> None:
        self.collector_of, self.cc, self.api = collector_of, cc, api
        self.patterns = [re.compile(pattern) for pattern in cc.codeline]
        self.calls: dict[str, int] = defaultdict(int)
        self.calls_in: StepCollector | None = None  # the collector the call counts belong to
        self.stacks: dict[str, set[str]] = defaultdict(set)
        self.own_files = {__file__, *api.files}

    def install(self) -> Handle:
        """Wrap the collectives; the handle puts the originals back."""
        return patch_attributes([(owner, name, self._wrap(name, getattr(owner, name)))
                                 for owner, name in self.api.targets()])

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
            try:
                return self.api.after(result, args, kwargs, functools.partial(self._observe_after, collector, label))
            except Exception as error:  # the caller gets the collective's result regardless
                collector.guard(CC, error)
                return result

        return collective

    def _call_stack(self) -> str:
        """The caller's frames, outermost first, as upstream writes them (``path[line]   function``), the
        wrappers' own left out."""
        return ";".join(f"{frame.filename}[{frame.lineno}]   {frame.name}" for frame in traceback.extract_stack()
                        if frame.filename not in self.own_files)

    def _observe_before(self, collector: StepCollector, name: str, args: tuple, kwargs: dict) -> str | None:
        """The call's label when its tensors are measured; the ``pre`` rows, or the stack under cc_log_only."""
        try:
            if self.patterns or self.cc.log_only:
                stack = self._call_stack()
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
                collector.add(CC, labelled(label, "pre", self.api.tensors(args, kwargs)), None)
            return label
        except Exception as error:  # the collective runs regardless
            collector.guard(CC, error)
            return None

    def _observe_after(self, collector: StepCollector, label: str, tensors: list) -> None:
        if collector is not self.collector_of():
            return  # an asynchronous call waited on after its step ended
        try:
            collector.add(CC, labelled(label, "post", tensors), None, reuse=False)
        except Exception as error:
            collector.guard(CC, error)

    def write_stacks(self, directory: Path) -> None:
        """cc_log_only's record, as upstream prints it: each op's distinct call stacks, frame by frame."""
        stacks = {name: [stack.split(";") for stack in sorted(found)] for name, found in sorted(self.stacks.items())}
        atomic_write_text(directory / CC_STACKS_FILE, json.dumps(stacks, indent=1))
