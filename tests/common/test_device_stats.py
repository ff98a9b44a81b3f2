"""The fetch of statistics left on a device (msprobe.core.dump.device_stats) and the ``stats`` every pending
handle exposes: ``None`` until its batch is fetched, then the numbers, so the encoder asks a handle whether it
is resolved instead of switching on its type. A device here is numpy: a "device value" is a float64 row."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from msprobe.core.dump.device_stats import STAT_COUNT, DeviceCopy, StatsAdapterBase, StatsHandle
from msprobe.core.dump.encode import EntryEncoder
from msprobe.core.dump.host_stats import HostCopy, host_stats
from msprobe.core.contract import NOT_HANDLED, TensorRecord

sys.path.insert(0, str(Path(__file__).parent))  # the shared reference next to this file (importlib mode)
from stats_reference import reference  # noqa: E402


def _row(values: np.ndarray) -> np.ndarray:
    """What a framework's device reduction leaves for ``values``, computed in float64."""
    data = values.astype(np.float64).ravel()
    finite = data[np.isfinite(data)]
    return np.array([data.max(), data.min(), data.mean(), math.sqrt(float(data @ data)),
                     finite.max() if finite.size else math.inf, finite.min() if finite.size else -math.inf])


class RowAdapter(StatsAdapterBase):
    """A framework whose device values are numpy rows; it counts what each transfer carries."""

    tensor_type = np.ndarray

    def __init__(self) -> None:
        self.transferred: list[int] = []

    def describe(self, tensor: np.ndarray) -> TensorRecord:
        return TensorRecord("numpy.ndarray", str(tensor.dtype), tuple(tensor.shape))

    def stats(self, tensor: np.ndarray) -> StatsHandle:
        return StatsHandle(_row(tensor))

    def encode_other(self, value):
        return NOT_HANDLED

    def transfer(self, values):
        self.transferred.append(sum(np.size(v) // STAT_COUNT for v in values))
        return [row for value in values for row in np.reshape(value, (-1, STAT_COUNT)).tolist()]

    def reduce_copies(self, copies, key):
        return np.concatenate([_row(copy) for copy in copies])


def _same(stats, array: np.ndarray) -> bool:
    """The fetched statistics are the float64 reference's, exactly (the rows were computed in float64)."""
    expected = reference(array)
    got = {name: getattr(stats, name) for name in expected}
    return all(a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))
               for a, b in ((got[name], expected[name]) for name in expected))


ARRAYS = [np.arange(12.0).reshape(3, 4) - 5, np.array([1.0, np.inf, -2.0]), np.array([np.nan, 3.0])]


def test_every_pending_handle_has_its_stats_once_fetched_and_lets_its_values_go():
    adapter = RowAdapter()
    handles = [StatsHandle(_row(ARRAYS[0])), DeviceCopy(ARRAYS[1].copy(), ("float64", 3)), host_stats(ARRAYS[2])]
    assert isinstance(handles[2], HostCopy)
    assert [h.stats for h in handles] == [None, None, None]
    got = adapter.fetch(handles)
    for handle, stats, array in zip(handles, got, ARRAYS):
        assert handle.stats is stats and _same(stats, array)
        assert handle.values is None
    assert adapter.transferred == [2]  # the copy's row and the handle's, in one transfer


def test_a_handle_met_twice_is_transferred_once_and_a_resolved_one_not_again():
    adapter = RowAdapter()
    handle = StatsHandle(_row(ARRAYS[1]))
    first, again = adapter.fetch([handle, handle])
    assert first is again and _same(first, ARRAYS[1])
    assert adapter.fetch([handle]) == [first]
    assert adapter.transferred == [1]  # the second fetch had nothing to bring


def test_the_encoder_waits_only_for_unresolved_handles():
    """A resolved handle (an unchanged tensor whose batch was fetched) gives its statistics at once: the entry
    is rendered when held, nothing is fetched for it."""
    adapter = RowAdapter()
    tensor = ARRAYS[0]
    resolved = adapter.stats(tensor)
    adapter.fetch([resolved])
    adapter.stats = lambda t: resolved if t is tensor else StatsHandle(_row(t))
    encoder = EntryEncoder(adapter)
    encoder.hold("Torch.add.0.forward", {"input_args": encoder.encode((tensor,), "Torch.add.0.forward", "input")})
    assert encoder._handles == []
    other = ARRAYS[2]
    encoder.hold("Torch.mul.0.forward", {"input_args": encoder.encode((other,), "Torch.mul.0.forward", "input")})
    assert len(encoder._handles) == 1
    released = dict(encoder.release())
    assert adapter.transferred == [1, 1]  # the first fetch above, then only the unresolved handle
    assert set(released) == {"Torch.add.0.forward", "Torch.mul.0.forward"}
