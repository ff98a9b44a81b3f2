"""anomaly_origin on a real MindSpore PyNative statistics dump written by msprobe's own PrecisionDebugger:
the planted log of a negative tensor is named, the cell around it is not (docs/anomaly_origin.md)."""

from __future__ import annotations

import mindspore
import numpy as np

from msprobe.core.anomaly import find_origins, read_step
from msprobe.mindspore import PrecisionDebugger


class Net(mindspore.nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.dense = mindspore.nn.Dense(4, 4)

    def construct(self, x):
        hidden = mindspore.ops.tanh(self.dense(x))
        return mindspore.ops.log(hidden - 10.0)  # NaN: the origin


def test_planted_nan_in_a_mindspore_dump_is_named(tmp_path):
    net = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="mix")
    debugger.start(net)
    out = net(mindspore.Tensor(np.ones((2, 4), np.float32)))
    debugger.stop()
    debugger.step()
    assert np.isnan(out.asnumpy()).all()
    origins = find_origins(read_step(tmp_path / "dump" / "step0"))
    assert len(origins) == 1 and origins[0].kind == "produced" and origins[0].rank == 0
    assert ".log." in origins[0].entry and not origins[0].entry.startswith("Cell")
    assert "mindspore.ops.log(hidden - 10.0)" in origins[0].as_json()["stack_line"]
