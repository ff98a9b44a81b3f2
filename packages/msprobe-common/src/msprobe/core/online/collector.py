"""The sending side of online run_ut as a dump-shaped collector (task ``tensor``, ``online_run_ut: true``).

It is the dump collector with its file parts replaced: the same :class:`~msprobe.core.dump.collector.ModuleSpans`
and selector decide which calls are kept, the same :func:`~msprobe.core.dump.encode.encode_value` describes
their arguments as dump.json would (so the receiver replays the entry exactly as run_ut replays a
dump), but each tensor's ``data_name`` names a tensor of the record instead of a file, and the record
goes to the :class:`~msprobe.core.online.sender.Sender` instead of a writer. Nothing lands on disk.

A forward record says whether its backward will follow (the backward is wanted and an output needs a
gradient), so the receiver knows whether to wait for it. Every hook body is guarded: an error is
counted as a dropped record and logged once, never raised into the training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msprobe.core.config import ConfigError, DebuggerConfig, Problem
from msprobe.core.dump.collector import CallState, ModuleSpans
from msprobe.core.dump.encode import encode_value
from msprobe.core.contract import Call, TensorAdapter
from msprobe.core.services.log import logger
from msprobe.core.lifecycle.naming import backward_name
from msprobe.core.online import wire
from msprobe.core.online.sender import Outgoing, Sender, SenderOptions
from msprobe.core.online.settings import SettingError, online_settings
from msprobe.core.online.tcp import DirLink, Link, TcpLink, tls_context
from msprobe.core.lifecycle.select import Selector


class OnlineCollector:
    """A :class:`~msprobe.core.contract.StepCollector` whose kept calls become records for ``Sender``."""

    destination = "sent to the run_ut receiver (nothing is written under dump_path)"  # the session's last words

    def __init__(self, selector: Selector, adapter: TensorAdapter, make_sender: Callable[[int], Sender],
                 limits: wire.Limits) -> None:
        self.selector, self.adapter, self.limits = selector, adapter, limits
        self.spans = ModuleSpans(selector)
        self.sender: Sender | None = None
        self._make_sender = make_sender
        self._pending: CallState[tuple[Outgoing, bool]] = CallState("online record")
        self._unsent: CallState[bool] = CallState("online forward not sent")  # its backward is not sent either
        self._step = 0
        self._open = False
        self._failed: set[str] = set()

    @property
    def exhausted(self) -> bool:
        return False

    def begin_step(self, step: int, rank: int | None) -> None:
        self.spans.new_step()
        self._step, self._open = step, True
        if self.sender is None:
            self.sender = self._make_sender(0 if rank is None else rank)

    def end_step(self) -> None:
        if self._open and self.sender is not None:
            self._open = False
            self.sender.step_end(self._step)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()

    # ------------------------------------------------------------------ CallSink
    def forward_start(self, call: Call) -> bool:
        if not self.spans.enter(call):
            return False
        wants_backward = self.selector.wants(backward_name(call.name))
        if call.is_module or self.sender is None or not (wants_backward or self.selector.wants(call.name)):
            return False  # the forward goes whenever either direction is wanted: the replay starts from it
        if not self.sender.accepting():
            self.sender.drop()
            return False
        try:
            record = Outgoing(self._step, {"name": call.name})
            entry = {"input_args": self._encode(call.args, record, "input"),
                     "input_kwargs": self._encode(call.kwargs, record, "kwargs")}
            record.meta["entry"] = entry
            self._pending.put(call, (record, wants_backward))
            return wants_backward
        except Exception as exc:
            self._failed_once(exc)
            return False

    def forward_end(self, call: Call, output: Any) -> None:
        self.spans.leave(call)
        pending = self._pending.take(call)
        if pending is None or self.sender is None:
            return None
        record, wants_backward = pending
        try:
            outputs = output if isinstance(output, (list, tuple)) else (output,)
            record.meta["entry"]["output"] = self._encode(outputs, record, "output")
            needs_grad = any(getattr(t, "requires_grad", False) for t in outputs if self.adapter.is_tensor(t))
            record.meta["backward"] = wants_backward and needs_grad
            if self.sender.offer(record):
                return None
        except Exception as exc:
            self._failed_once(exc)
        self._unsent.put(call, True)
        return None

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        name = backward_name(call.name)
        if self._unsent.take(call):  # its forward was dropped: this record is lost with it
            if self.sender is not None:
                self.sender.drop()
            return
        if not self._open or self.sender is None or not self.selector.begin(name) or not self.selector.wants(name):
            return
        try:
            record = Outgoing(self._step, {"name": name})
            record.meta["entry"] = {"input": self._encode(tuple(grad_input), record, "input"),
                                    "output": self._encode(tuple(grad_output), record, "output")}
            self.sender.offer(record)
        except Exception as exc:
            self._failed_once(exc)

    # ------------------------------------------------------------------ helpers
    def _encode(self, value: Any, record: Outgoing, part: str) -> Any:
        """``value`` encoded as for dump.json (records still objects); each tensor snapshot joins ``record``
        under its ``data_name``."""
        adapter = self.adapter

        def leaf(item: Any, path: tuple) -> Any:
            if not adapter.is_tensor(item):
                return adapter.encode_other(item)
            described = adapter.describe(item)
            name = ".".join([record.meta["name"], part, *(str(i) for i in path)])  # unique in a record pair
            described.data_name = name
            record.nbytes += wire.tensor_nbytes(described.dtype.removeprefix("torch."), described.shape)
            if record.nbytes > self.limits.max_message:
                raise wire.WireError(f"{record.meta['name']} is larger than the maximum message size "
                                     f"({self.limits.max_message} bytes)")
            record.tensors.append((name, adapter.snapshot(item)))
            return described

        return encode_value(value, leaf)  # its records become JSON on the sender's thread

    def _failed_once(self, exc: Exception) -> None:
        if self.sender is not None:
            self.sender.drop()
        key = f"{type(exc).__name__}: {exc}"[:200]
        if key not in self._failed:
            self._failed.add(key)
            logger.warning("online run_ut: a call was not captured (%s); training goes on", key)


# ---------------------------------------------------------------------------------------------- building
def link_maker(section: Any) -> Callable[[int], Link]:
    """How the sender of a rank reaches the receiver, from the tensor section; checked now (a
    ConfigError naming the field before the training starts), connected later by the sender."""
    if section.nfs_path is not None:
        return lambda rank: DirLink(section.nfs_path)
    try:
        context = tls_context(section.tls_path, section.host, server=False, field="tensor.tls_path")
    except ValueError as exc:
        raise ConfigError([Problem("tensor.tls_path", section.tls_path, str(exc))]) from None
    return lambda rank: TcpLink(section.host, section.port, context, rank)


def sender_options() -> SenderOptions:
    """The sender's bounds (:mod:`.settings`); a ConfigError naming the variable when one is bad."""
    try:
        settings = online_settings()
    except SettingError as exc:
        raise ConfigError([Problem(exc.name, exc.value, exc.allowed)]) from None
    return SenderOptions(queue_size=settings.queue_size, queue_bytes=settings.queue_mb << 20,
                         max_wait=settings.max_wait_ms / 1000.0,
                         limits=wire.Limits.from_megabytes(settings.max_message_mb))


def build_online(config: DebuggerConfig, kit: Any, on_finish: Callable[[], None]) -> Any:
    """The session of an online sender: checked (link, TLS files) before the training starts."""
    from msprobe.core.lifecycle.select import selector_for
    from msprobe.core.lifecycle.session import Session

    make_link = link_maker(config.section)
    options = sender_options()

    def make_sender(rank: int) -> Sender:
        return Sender(make_link(rank), rank, kit.wire_tensor, options)

    collector = OnlineCollector(selector_for(config), kit.adapter(), make_sender, options.limits)

    def finished() -> None:
        collector.close()
        on_finish()

    return Session.with_kit(config, collector, kit, finished, prepare_model=kit.prepare_for_comparison)
