"""What every interception point does with a call it sees, written once for both frameworks.

A framework file only knows how to *see* a call (a dispatch mode, a hook, a replaced attribute) and how
to undo that. What happens next is the same everywhere and lives here: count the call, name it, hand
it to the sink before it runs and after it returns, and report its backward — all with interception
paused while the sink works, so the sink's own framework calls are never seen as the user's.

:class:`Level` says what a dump level collects; every interceptor asks it instead of comparing names.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from msprobe.core.contract import Call, CallSink
from msprobe.core.lifecycle.naming import (
    FORWARD,
    PARAMETERS_GRAD,
    CallCounter,
    api_name,
    module_name,
    parameters_grad_name,
)

MODULE_LEVELS = ("L0", "mix")  # the levels that collect modules/cells (construct.json has their nesting)
API_LEVELS = ("L1", "mix")


@dataclass(frozen=True)
class Level:
    """A dump level: ``L0`` modules/cells, ``L1`` APIs, ``mix`` both."""

    name: str

    NAMES = ("L0", "L1", "mix")

    def __post_init__(self) -> None:
        if self.name not in self.NAMES:
            raise ValueError(f"level {self.name!r} is not one of {', '.join(self.NAMES)}")

    @property
    def apis(self) -> bool:
        return self.name in API_LEVELS

    @property
    def modules(self) -> bool:
        return self.name in MODULE_LEVELS


@dataclass
class Started:
    """A call the sink has seen start: the hook keeps it until the call returns."""

    call: Call
    wants_backward: bool


Quiet = Callable[[], AbstractContextManager]


class CallReporter:
    """Counts, names and reports calls to ``sink``; owns the two switches every hook reads.

    ``active``: collection is on (the interceptor is enabled). ``paused``: msprobe itself is running
    framework code (the sink, a re-run) and nothing must be seen as a user call. ``quiet``: a framework
    context for the sink's work (MindSpore: gradient recording off, so statistics stay out of the graph).
    """

    def __init__(self, sink: CallSink, quiet: Quiet = nullcontext) -> None:
        self.sink = sink
        self.counter = CallCounter()
        self.active = False
        self.paused = False
        self._quiet = quiet

    @property
    def sees_calls(self) -> bool:
        """A hook firing now reports a user call."""
        return self.active and not self.paused

    def pause(self) -> _Paused:
        """``with reporter.pause():`` — framework code run inside is msprobe's own, not the user's."""
        return _Paused(self)

    def start_api(self, prefix: str, api: str, args: tuple, kwargs: dict, *, mutates: bool = False,
                  rerun: Callable[..., Any] | None = None) -> Started:
        """An API call is about to run: count it (``{prefix}.{api}``) and tell the sink."""
        count = self.counter.next(f"{prefix}.{api}")
        call = Call(api_name(prefix, api, count, FORWARD), args, kwargs, mutates_inputs=mutates, rerun=rerun)
        return Started(call, bool(self._to_sink(self.sink.forward_start, call)))

    def start_module(self, kind: str, path: str, cls: str, args: tuple, kwargs: dict) -> Started:
        """A module (``kind`` ``Module``) or cell (``Cell``) forward is about to run."""
        count = self.counter.next(f"{kind}.{path}.{cls}")
        call = Call(module_name(kind, path, cls, FORWARD, count), args, kwargs, is_module=True)
        return Started(call, bool(self._to_sink(self.sink.forward_start, call)))

    def end(self, started: Started, output: Any) -> Any:
        """The call returned ``output``; what the user gets: ``output`` or the sink's replacement. The
        call's arguments are let go (:meth:`~msprobe.core.contract.Call.release_arguments`)."""
        replacement = self._to_sink(self.sink.forward_end, started.call, output)
        started.call.release_arguments()
        return output if replacement is None else replacement

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        """The call's backward ran; reported only while collecting (not after ``disable``)."""
        if self.sees_calls:
            self._to_sink(self.sink.backward, call, grad_input, grad_output)

    def parameters_grad(self, kind: str, path: str, cls: str, grads: dict) -> None:
        """A module's (cell's) parameter gradients of one backward pass are all there (``grads``: parameter
        name → gradient): counted per module and step, named ``{kind}.{path}.{cls}.parameters_grad.{n}``,
        handed to a sink that keeps them. Reported only while collecting."""
        keep = getattr(self.sink, PARAMETERS_GRAD, None)
        if keep is None or not self.sees_calls:
            return
        count = self.counter.next(f"{kind}.{path}.{cls}.{PARAMETERS_GRAD}")
        self._to_sink(keep, parameters_grad_name(kind, path, cls, count), grads)

    def unrecorded(self, func: Callable[..., Any], around: Quiet = nullcontext) -> Callable[..., Any]:
        """``Call.rerun``: ``func`` run with interception paused (inside ``around``)."""

        def rerun(*args: Any, **kwargs: Any) -> Any:
            with self.pause(), around():
                return func(*args, **kwargs)

        return rerun

    def _to_sink(self, method: Callable[..., Any], *args: Any) -> Any:
        with self.pause(), self._quiet():
            return method(*args)


class _Paused:
    """The context of :meth:`CallReporter.pause` (a plain class: a generator context manager cost more
    than the rest of a call's bookkeeping, and this runs several times per recorded call)."""

    __slots__ = ("_reporter", "_previous")

    def __init__(self, reporter: CallReporter) -> None:
        self._reporter = reporter
        self._previous = False

    def __enter__(self) -> None:
        self._previous, self._reporter.paused = self._reporter.paused, True

    def __exit__(self, *exc_info: object) -> None:
        self._reporter.paused = self._previous
