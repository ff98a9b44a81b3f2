"""The debugger lifecycle both frameworks share: start, stop, step, finish (docs/pytorch/dump.md#api).

A framework's ``PrecisionDebugger`` is a thin shell that builds a :class:`Session` with its
interceptor, tensor adapter and rank lookup; the rules of when to collect, when to write and when to
finish are written once, here — among them that a write error (a full disk) stops dumping, never the
training, and that no error of msprobe's reaches the user's step (:class:`FailSafeSink`).
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from msprobe.core.config import DebuggerConfig
from msprobe.core.config.switch import DumpSwitch
from msprobe.core.contract import Call, CallSink, Interceptor, StepCollector, UserComputationError
from msprobe.core.lifecycle.calls import MODULE_LEVELS
from msprobe.core.lifecycle.empty_dump import SelectionTally
from msprobe.core.lifecycle.rows import RowSelection
from msprobe.core.services.fileio import UnsafePathError
from msprobe.core.services.heap import FrozenHeap
from msprobe.core.services.log import logger, set_rank

# What writing a dump can raise: the operating system's errors (a full disk, a read-only or removed
# directory, a rank directory another run holds) and our refusal of a symlink planted where we write.
WRITE_ERRORS = (OSError, UnsafePathError)
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class FailSafeSink:
    """The collector as the hooks see it, so that nothing msprobe raises reaches the user's training.

    The hooks call into the collector from inside the user's forward and backward; an error raised there
    would end the run. Here it is caught instead:

    - a write error (a full disk) is handed to ``on_error`` once, and every later call is a no-op:
      dumping stops, training goes on;
    - any other error while recording one call (a tensor msprobe cannot read, a framework state it did
      not expect) is logged once, with its traceback; that call is left out and the rest of the step is
      recorded — except the user's own error that an asynchronous framework raised at msprobe's read
      (:class:`~msprobe.core.contract.UserComputationError`), which the user's call raises as it is.

    An error at a step's begin or end (``run``) stops dumping as a write error does, since the step's
    files cannot be completed.
    """

    def __init__(self, collector: StepCollector, on_error: Callable[[BaseException], None]) -> None:
        self.collector = collector
        self.failed = False
        self.skipped = 0  # calls left out after an internal error
        self._on_error = on_error

    def forward_start(self, call: Call) -> bool:
        return bool(self._guard(self.collector.forward_start, call.name, False, call))

    def forward_end(self, call: Call, output: Any) -> Any:
        return self._guard(self.collector.forward_end, call.name, None, call, output)

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        self._guard(self.collector.backward, call.name, None, call, grad_input, grad_output)

    def parameters_grad(self, name: str, grads: dict) -> None:
        """A module's parameter gradients of one backward pass (levels L0, mix), for a collector that keeps
        them (``parameters_grad``); any other collector never sees them."""
        keep = getattr(self.collector, "parameters_grad", None)
        if keep is not None:
            self._guard(keep, name, None, name, grads)

    def record(self, name: str, method: Callable[..., Any], *args: Any) -> None:
        """``method(*args)`` guarded as a call's recording is (level debug's ``save``, its gradients)."""
        self._guard(method, name, None, *args)

    def _guard(self, method: Callable[..., Any], name: str, default: Any, *args: Any) -> Any:
        if self.failed:
            return default
        try:
            return method(*args)
        except WRITE_ERRORS as error:
            self.fail(error)
        except UserComputationError as error:  # the user's own error, deferred to our read: theirs to see
            raise error.original from None
        except Exception as error:  # whatever else it is, the user's step goes on
            self.skipped += 1
            if self.skipped == 1:
                logger.error(f"msprobe could not record {name} and leaves it out; training goes on, and later "
                             f"calls are recorded (this is logged once): {type(error).__name__}: {error}",
                             exc_info=error)
        return default

    def run(self, action: Callable[[], None]) -> None:
        """Run ``action`` (the begin or end of a step): any error stops dumping, never the training."""
        if self.failed:
            return
        try:
            action()
        except Exception as error:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        if not self.failed:
            self.failed = True
            self._on_error(error)

    def silence(self) -> None:
        """Every later call is a no-op, with nothing logged (a forked child's copy, see Session)."""
        self.failed = True


def write_error_message(error: BaseException, dump_path: str, step: int) -> str:
    """The one log line of a failed write: what, where, how much space was missing when known."""
    where = getattr(error, "filename", None) or dump_path
    what = getattr(error, "strerror", None) or str(error)
    details = []
    if getattr(error, "errno", None) in _SPACE_ERRNOS:
        needed = getattr(error, "needed", None)
        if needed:
            details.append(f"at least {needed:,} more bytes were needed")
        free = _free_bytes(Path(where))
        if error.errno == errno.EFBIG:
            details.append("the file size limit of this process (ulimit -f) was reached")
        elif free is not None:
            details.append(f"{free:,} bytes are free there")
    detail = f" ({'; '.join(details)})" if details else ""
    return (
        f"msprobe could not write {where}: {what}{detail}. Dumping stops for the rest of this run and "
        f"training goes on; steps finished before step {step} are complete, files of step {step} that were "
        f"not finished are missing."
    )


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


# Every session of the process. One forked while a session collects (a DataLoader worker started
# inside the window) runs the dataset's code, not the training's: its copy of that session records nothing.
_sessions: weakref.WeakSet[Session] = weakref.WeakSet()


def _silence_in_child() -> None:
    for session in list(_sessions):
        if session.started:
            session.sink.silence()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_silence_in_child)


@atexit.register
def _report_empty_at_exit() -> None:
    """A run that never called finish() is told at its end, too, when it dumped nothing."""
    for session in list(_sessions):
        if not session.finished:
            session.report_if_empty()


def _raise_for_user(deferred: UserComputationError | None) -> None:
    if deferred is not None:
        raise deferred.original


class Session:
    """Step and rank bookkeeping around one interceptor and one collector.

    A write error (see :class:`FailSafeSink`) ends the session at the next ``stop``/``step``: hooks
    removed, dropout restored, the training untouched.
    """

    def __init__(
        self,
        config: DebuggerConfig,
        collector: StepCollector,
        make_interceptor: Callable[[CallSink], Interceptor],
        current_rank: Callable[[], int | None],
        on_finish: Callable[[], None] = lambda: None,
        prepare_model: Callable[[Any], None] = lambda model: None,
        rows: RowSelection | None = None,
    ) -> None:
        self.config = config
        self.collector = collector
        self.selector = collector.selector
        self.sink = FailSafeSink(collector, self._write_failed)
        self.interceptor = make_interceptor(self.sink)
        self._current_rank = current_rank
        self._on_finish = on_finish
        self._prepare_model = prepare_model  # what the task changes in the model while it runs (dropout p)
        self.rows = rows  # a dump's slice / request_id: which rows of the batch are kept
        self.current_step = 0
        self.model: Any = None
        self.started = False
        self.finished = False
        self._step_open = False
        self.switch = DumpSwitch(config.config_file, config.dump_enable)  # config.json's dump_enable
        self._switch_read: tuple[int, bool] | None = None  # (step, its state): asked once per step
        self.tally = SelectionTally()  # what rank, step, dump_enable, scope and list let through
        self._heap = FrozenHeap()  # full collections walk only what capture allocates (msprobe.core.services.heap)
        _sessions.add(self)

    @classmethod
    def with_kit(cls, config: DebuggerConfig, collector: StepCollector, kit: Any, on_finish: Callable[[], None],
                 *, level: str | None = None, prepare_model: Callable[[Any], None] | None = None,
                 rows: RowSelection | None = None) -> Session:
        """A session on a framework kit (``msprobe.core.contract``): its interceptor at ``level`` (default: the
        configured one) and its rank lookup."""
        level = config.level if level is None else level
        return cls(config, collector, lambda sink: kit.interceptor(sink, level), kit.current_rank, on_finish,
                   prepare_model=prepare_model or (lambda model: None), rows=rows)

    def start(self, model: Any = None, scheduled_tokens: Mapping[str, int] | None = None) -> None:
        """Collection on for this step when it is selected; ``scheduled_tokens`` describes a serving batch
        (the rows each request holds along dim 0, docs/pytorch/inference.md): with ``request_id`` set, a batch
        without the request is not dumped."""
        if self.finished or self.started:
            return
        in_batch = self.rows is None or self.rows.schedule(scheduled_tokens)
        self._attach(model)
        if self.model is not None:
            self._prepare_model(self.model)
        rank = self._current_rank()
        set_rank(rank)
        rank_selected, step_selected = self.selector.selects_rank(rank), self.selector.selects_step(self.current_step)
        self.tally.started(self.current_step, rank, rank_selected, step_selected)
        if not (step_selected and rank_selected):
            return
        if not self._switched_on():
            return
        self.tally.switched(True)
        if self.rows is not None and self.rows.request_id is not None:
            self.tally.requested(in_batch)
        if not in_batch:
            return
        if not self._step_open:
            self._step_open = True
            self.sink.run(lambda: self.collector.begin_step(self.current_step, rank))
            if self.sink.failed:
                self.finish()
                return
        self._heap.freeze()
        self.interceptor.enable()
        self.started = True

    def _switched_on(self) -> bool:
        """``dump_enable`` for this step, asked at its first start: a step runs as it started."""
        if self._switch_read is None or self._switch_read[0] != self.current_step:
            self._switch_read = (self.current_step, self.switch.enabled())
        return self._switch_read[1]

    def stop(self) -> None:
        """Collection off; this step's files are complete on disk when this returns."""
        _raise_for_user(self._stop())

    def forward_backward_dump_end(self) -> None:
        """No more API collection in this step (e.g. the optimizer's)."""
        _raise_for_user(self._collection_off())

    def step(self) -> None:
        deferred = self._stop()
        self.current_step += 1
        self.interceptor.reset_counts()
        last = self.selector.last_step()
        if not self.finished and (self.collector.exhausted or (last is not None and self.current_step > last)):
            self.finish()
        _raise_for_user(deferred)

    def _stop(self) -> UserComputationError | None:
        deferred = self._collection_off()
        if self._step_open:
            self._step_open = False
            self.sink.run(self.collector.end_step)
        self._heap.thaw()
        if self.sink.failed:
            self.finish()
        return deferred

    def _collection_off(self) -> UserComputationError | None:
        """Interception off. A framework that reads tensors in batches (MindSpore on the CPU) makes its last
        reads now; the user's own error raised at one of them is returned, to raise once the step's
        bookkeeping is done."""
        if not self.started:
            return None
        self.started = False
        try:
            self.interceptor.disable()
        except UserComputationError as error:
            return error
        return None

    def finish(self) -> None:
        """Remove every hook; the debugger does nothing from here on."""
        if self.finished:
            return
        self.finished = True
        self.stop()
        self.interceptor.detach()
        self._on_finish()
        self.report_if_empty()
        if self.sink.failed:
            logger.info("msprobe removed its hooks after the write error above; nothing more is dumped")
        else:
            # a collector that writes no files says where its data went (online run_ut: to the receiver)
            where = getattr(self.collector, "destination", None) or f"written under {self.config.dump_path}"
            logger.info(f"msprobe has finished: the last selected step was {where}")

    def report_if_empty(self) -> None:
        """One warning line when the run selected nothing that ran, naming the key (once)."""
        message = self.tally.empty_message(self.config, self.selector)
        if message is not None:
            logger.warning(message)

    def _write_failed(self, error: BaseException) -> None:
        """Log the error once and drop the half-written step (called from inside a hook: no hook
        is removed here; :meth:`stop` finishes the session)."""
        if isinstance(error, WRITE_ERRORS):
            logger.error(write_error_message(error, self.config.dump_path, self.current_step))
        else:
            logger.error(f"msprobe failed at the boundary of step {self.current_step} ({type(error).__name__}: "
                         f"{error}). Dumping stops for the rest of this run and training goes on; steps "
                         f"finished before step {self.current_step} are complete.", exc_info=error)
        abort = getattr(self.collector, "abort", None)
        if abort is not None:
            try:
                abort()
            except WRITE_ERRORS:
                pass

    def _attach(self, model: Any) -> None:
        if model is not None and model is not self.model:
            self.model = model
            self.interceptor.attach(model)
        if self.model is None and self.config.level in MODULE_LEVELS:
            raise ValueError(
                f"level {self.config.level!r} collects modules, so the debugger needs the model: pass it to "
                "PrecisionDebugger(..., model=model) or to debugger.start(model)"
            )
