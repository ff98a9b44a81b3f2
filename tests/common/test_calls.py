"""The call reporter both interceptors share, driven with plain Python values (no framework)."""

from __future__ import annotations

import pytest

from msprobe.core.lifecycle.calls import CallReporter, Level


class _Sink:
    def __init__(self, reporter_box: list) -> None:
        self.events: list[tuple] = []
        self._box = reporter_box

    def forward_start(self, call) -> bool:
        self.events.append(("start", call.name, self._box[0].paused))
        return call.name.startswith("Torch")

    def forward_end(self, call, output):
        self.events.append(("end", call.name, output))
        return "replaced" if output == "replace me" else None

    def backward(self, call, grad_input, grad_output) -> None:
        self.events.append(("backward", call.name, grad_input, grad_output))


def _reporter() -> tuple[CallReporter, _Sink]:
    box: list = []
    sink = _Sink(box)
    reporter = CallReporter(sink)
    box.append(reporter)
    reporter.active = True
    return reporter, sink


def test_calls_are_counted_named_and_reported_with_interception_paused():
    reporter, sink = _reporter()
    first = reporter.start_api("Torch", "add", (1, 2), {})
    second = reporter.start_api("Torch", "add", (1, 2), {}, mutates=True)
    cell = reporter.start_module("Cell", "block.fc", "Dense", (1,), {})
    assert [first.call.name, second.call.name] == ["Torch.add.0.forward", "Torch.add.1.forward"]
    assert second.call.mutates_inputs and cell.call.is_module
    assert cell.call.name == "Cell.block.fc.Dense.forward.0"
    assert first.wants_backward and not cell.wants_backward
    assert all(paused for kind, _, paused in sink.events if kind == "start")
    assert reporter.end(first, "out") == "out" and reporter.end(second, "replace me") == "replaced"
    assert not reporter.paused


def test_backward_is_reported_only_while_collecting():
    reporter, sink = _reporter()
    started = reporter.start_api("Torch", "mul", (), {})
    reporter.backward(started.call, ("g",), ("h",))
    reporter.active = False
    reporter.backward(started.call, ("late",), ())
    assert [e for e in sink.events if e[0] == "backward"] == [("backward", "Torch.mul.0.forward", ("g",), ("h",))]


def test_a_rerun_is_unrecorded_and_counters_reset():
    reporter, _ = _reporter()
    seen = []
    rerun = reporter.unrecorded(lambda x: seen.append(reporter.sees_calls) or x * 2)
    assert rerun(4) == 8 and seen == [False] and reporter.sees_calls
    reporter.start_api("Torch", "add", (), {})
    reporter.counter.reset()
    assert reporter.start_api("Torch", "add", (), {}).call.name == "Torch.add.0.forward"


def test_levels_say_what_they_collect():
    assert (Level("L0").modules, Level("L0").apis) == (True, False)
    assert (Level("L1").modules, Level("L1").apis) == (False, True)
    assert (Level("mix").modules, Level("mix").apis) == (True, True)
    with pytest.raises(ValueError, match="'L2' is not one of L0, L1, mix"):
        Level("L2")
