"""The background writer of tensor files (msprobe.core.dump.tensor_writer): copies taken on the saving
thread, files in order, the byte budget, write errors handed back, draining and discarding."""

from __future__ import annotations

import errno
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.dump.tensor_writer import QUEUE_MB, TensorWriter
from msprobe.core.services.fileio import DumpWriteError
from msprobe.core.services.settings import SettingError

sys.path.insert(0, str(Path(__file__).parents[1]))
from numpy_adapter import NumpyTensorAdapter  # noqa: E402


class GatedAdapter(NumpyTensorAdapter):
    """Each file waits for ``gate`` before its bytes go out; ``fail_on`` makes that file's write fail
    once, as a full disk does."""

    def __init__(self, fail_on: int | None = None) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.writing = threading.Event()  # a file is being written
        self.written: list[float] = []  # the first element of each payload, in the order written
        self.fail_on = fail_on

    def write_frozen(self, payload, handle) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self.writing.set()
        self.gate.wait(timeout=30)
        if self.fail_on is not None and len(self.written) == self.fail_on:
            self.fail_on = None  # once: the disk has room again later
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written.append(float(payload.reshape(-1)[0]))
        super().write_frozen(payload, handle)


def test_files_hold_what_was_saved_and_are_complete_when_drain_returns(tmp_path):
    adapter = GatedAdapter()
    writer = TensorWriter(adapter)
    arrays = [np.full((3, 4), float(i), dtype=np.float32) for i in range(20)]
    for i, array in enumerate(arrays):
        writer.save(array[:, 1:], tmp_path / f"{i}.npy")  # a view: its own elements only
        array[:] = -1.0  # changed in place after the call
    assert not list(tmp_path.glob("*.npy"))  # nothing written yet: the writer waits for the gate
    adapter.gate.set()
    writer.drain()
    assert adapter.written == [float(i) for i in range(20)]  # in the order saved
    for i in range(20):
        assert np.array_equal(np.load(tmp_path / f"{i}.npy"), np.full((3, 3), float(i), dtype=np.float32))
    assert not [t for t in threading.enumerate() if t.name == "msprobe-tensor-writer"]  # let go
    writer.save(np.zeros(2), tmp_path / "again.npy")  # a later step starts it again
    writer.drain()
    assert np.array_equal(np.load(tmp_path / "again.npy"), np.zeros(2))


def test_a_save_past_the_byte_budget_waits_until_the_writer_catches_up(tmp_path):
    adapter = GatedAdapter()
    writer = TensorWriter(adapter, budget_bytes=3 * 800)
    for i in range(3):
        writer.save(np.full(100, float(i)), tmp_path / f"{i}.npy")  # 800 bytes each: the budget is full
    fourth = threading.Thread(target=writer.save, args=(np.full(100, 3.0), tmp_path / "3.npy"))
    fourth.start()
    fourth.join(timeout=0.5)
    assert fourth.is_alive()  # waiting on the saving thread, not queued beyond the budget
    adapter.gate.set()
    fourth.join(timeout=30)
    assert not fourth.is_alive()
    writer.drain()
    assert adapter.written == [0.0, 1.0, 2.0, 3.0]


def test_a_tensor_larger_than_the_budget_waits_for_an_empty_queue_then_goes(tmp_path):
    adapter = GatedAdapter()
    adapter.gate.set()
    writer = TensorWriter(adapter, budget_bytes=100)
    writer.save(np.ones(1000), tmp_path / "big.npy")
    writer.save(np.ones(1000), tmp_path / "big2.npy")
    writer.drain()
    assert np.load(tmp_path / "big2.npy").shape == (1000,)


def test_a_write_error_is_raised_on_the_saving_thread_and_nothing_is_left_behind(tmp_path):
    adapter = GatedAdapter(fail_on=1)
    writer = TensorWriter(adapter)
    for i in range(5):
        writer.save(np.full(4, float(i)), tmp_path / f"{i}.npy")
    adapter.gate.set()
    with pytest.raises(DumpWriteError) as raised:
        writer.drain()
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "1.npy")
    with pytest.raises(DumpWriteError):  # the next save says so too, until the step is given up
        writer.save(np.zeros(1), tmp_path / "x.npy")
    writer.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.npy"]  # the files after the error: never written
    writer.save(np.zeros(1), tmp_path / "after.npy")  # a writer given up on can be used again
    writer.drain()
    assert (tmp_path / "after.npy").is_file()


class OpenedOnDiscard(TensorWriter):
    """Opens the adapter's gate once discard() has dropped the queue: the file being written finishes after."""

    def _drop_queued(self) -> None:
        super()._drop_queued()
        self.adapter.gate.set()


def test_discard_drops_what_is_queued(tmp_path):
    adapter = GatedAdapter()
    writer = OpenedOnDiscard(adapter)
    for i in range(5):
        writer.save(np.full(4, float(i)), tmp_path / f"{i}.npy")
    assert adapter.writing.wait(30)  # the writer thread is inside the first file
    writer.discard()  # waits for the file being written, drops the rest
    assert adapter.written == [0.0]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_budget_comes_from_the_environment_and_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("MSPROBE_TENSOR_QUEUE_MB", "64")
    assert TensorWriter(NumpyTensorAdapter()).budget == 64 << 20
    monkeypatch.setenv("MSPROBE_TENSOR_QUEUE_MB", "0")
    with pytest.raises(SettingError, match=r"MSPROBE_TENSOR_QUEUE_MB='0': allowed an integer 1\.\."):
        TensorWriter(NumpyTensorAdapter())
    monkeypatch.delenv("MSPROBE_TENSOR_QUEUE_MB")
    assert TensorWriter(NumpyTensorAdapter()).budget == QUEUE_MB.default << 20


EXIT_WITHOUT_STOP = """
import sys, threading
sys.path.insert(0, sys.argv[2])
import numpy as np
from pathlib import Path
from numpy_adapter import NumpyTensorAdapter
from msprobe.core.dump.tensor_writer import TensorWriter

writing, given_up = threading.Event(), threading.Event()

class Held(NumpyTensorAdapter):
    def write_frozen(self, payload, handle):
        writing.set()
        given_up.wait(30)  # inside the first file until the exit has given up the queued ones
        super().write_frozen(payload, handle)

class Watched(TensorWriter):
    def _drop_queued(self):
        super()._drop_queued()
        given_up.set()

writer = Watched(Held())
for i in range(5):
    writer.save(np.full(4, float(i)), Path(sys.argv[1]) / f"{i}.npy")
assert writing.wait(30)  # the writer thread is inside the first file
"""  # then the program ends without drain(), as one that never calls stop()


def test_a_program_that_ends_without_stop_leaves_no_temporary_file(tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(EXIT_WITHOUT_STOP)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, str(script), str(out), str(Path(__file__).parents[1])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.endswith(".tmp")]
    assert names == ["0.npy"]  # the file being written finished; the rest were given up
