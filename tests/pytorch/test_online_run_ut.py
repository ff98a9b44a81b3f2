"""Online run_ut end to end on loopback: a real training loop streams to ``msprobe -f pytorch run_ut``
with ``is_online: true`` over TCP+TLS or a shared directory; faults on either side.

Every receiver and training process is started with a timeout and killed at teardown; ports are
taken free from the system."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.core.config import ConfigError
from msprobe.core.online import wire
from msprobe.core.online.tcp import tls_context
from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.online.receive import receive_if_online
from msprobe.pytorch.online.tensors import from_wire, wire_tensor

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))
from online_tls import make_tls  # noqa: E402

pytestmark = pytest.mark.timeout(120)
SCRIPT = Path(__file__).parent / "scripts" / "online_train.py"
TRAINING_APIS = ("Functional.linear.0", "Functional.gelu.0", "Functional.linear.1", "Tensor.pow.0", "Tensor.mean.0")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


class Receiver:
    """``msprobe -f pytorch run_ut -config ... -o ...`` in a subprocess, its log in a file."""

    def __init__(self, tmp: Path, section: dict) -> None:
        self.out = tmp / "out"
        self.log = tmp / "receiver.log"
        config = write_json(tmp / "receiver.json", {"task": "run_ut", "run_ut": {"is_online": True, **section}})
        env = {**os.environ, "MSPROBE_ONLINE_WORKERS": "1"}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "msprobe.core", "-f", "pytorch", "run_ut", "-config", str(config), "-o",
                 str(self.out)], stdout=log, stderr=subprocess.STDOUT, env=env)

    def text(self) -> str:
        return self.log.read_text()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while "receiving ranks" not in self.text():
            assert self.process.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.05)

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def summary(self) -> dict:
        return json.loads((self.out / "online_summary.json").read_text())

    def results(self, step: int, rank: int = 0) -> dict[str, tuple[str, str]]:
        (path,) = (self.out / f"step{step}" / f"rank{rank}").glob("accuracy_checking_result_*.csv")
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return {r["API name"]: (r["Forward Test Success"], r["Backward Test Success"])
                    for r in csv.DictReader(handle)}

    def details(self, step: int, rank: int = 0) -> dict[str, dict]:
        (path,) = (self.out / f"step{step}" / f"rank{rank}").glob("accuracy_checking_details_*.csv")
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return {r["API Name"]: r for r in csv.DictReader(handle)}


@pytest.fixture
def receivers():
    started: list[Receiver] = []

    def start(tmp: Path, section: dict) -> Receiver:
        receiver = Receiver(tmp, section)
        started.append(receiver)
        receiver.wait_ready()
        return receiver

    yield start
    for receiver in started:
        receiver.kill()


def train(config: Path, steps: int, after_step=lambda step: None) -> list[dict]:
    """The tiny model trained ``steps`` steps in this process; per step, what the first linear saw."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(str(config))
    seen = []
    for step in range(steps):
        debugger.start(model)
        x = torch.randn(5, 8)
        weight, bias = model[0].weight.detach().clone(), model[0].bias.detach().clone()
        hidden = model[0](x)
        loss = model[2](model[1](hidden)).pow(2).mean()
        loss.backward()
        debugger.stop()
        optimizer.step()
        optimizer.zero_grad()
        debugger.step()
        seen.append({"x": x, "weight": weight, "bias": bias, "y": hidden.detach().clone()})
        after_step(step)
    debugger.finish()
    return seen


def sender_config(tmp: Path, tensor: dict, step: list[int]) -> Path:
    return write_json(tmp / "sender.json", {"task": "tensor", "dump_path": str(tmp / "dump"), "level": "L1",
                                            "step": step, "tensor": {"online_run_ut": True, **tensor}})


def _tls_socket(port: int, folder: Path) -> socket.socket:
    context = tls_context(str(folder), "127.0.0.1", server=False, field="tls_path")
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                               server_hostname="127.0.0.1")


def test_tls_end_to_end_with_a_real_training_loop_and_faults(tmp_path, receivers):
    tls = make_tls(tmp_path / "tls")
    port = free_port()
    receiver = receivers(tmp_path, {"host": "127.0.0.1", "port": port, "rank_list": [0],
                                    "tls_path": str(tls["receiver"])})
    # faults first: garbage instead of a TLS handshake, a certificate of another CA, an oversized length
    # field inside a sound TLS connection, a training process killed while it streams
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(os.urandom(512))
    with pytest.raises(OSError):
        with _tls_socket(port, tls["rogue"]) as sock:
            sock.sendall(wire.control(wire.Kind.HELLO, 0))
            assert sock.recv(4096)  # refused: the handshake fails or the connection is closed
    with _tls_socket(port, tls["sender"]) as sock:
        sock.sendall(wire.control(wire.Kind.HELLO, 0))
        sock.recv(4096)
        sock.sendall(wire.HEADER.pack(wire.MAGIC, wire.VERSION, int(wire.Kind.DATA), 0, 0, 0, 1, 2**60, 0))
        time.sleep(0.2)
    tensor = {"host": "127.0.0.1", "port": port, "tls_path": str(tls["sender"])}
    endless = sender_config(tmp_path, tensor, [step for step in range(100) if step != 2])  # never stops; its step 2
    # is left out, so that a step2 report below can come only from the real run
    victim = subprocess.Popen([sys.executable, str(SCRIPT), str(endless), "0", "0.05"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        for _ in range(10):  # a few steps streamed, then killed wherever it is
            assert "done" in victim.stdout.readline()
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
        victim.wait(10)
    deadline = time.monotonic() + 30
    while "without STOP" not in receiver.text() and "before HELLO" not in receiver.text():  # noticed; goes on
        assert receiver.process.poll() is None and time.monotonic() < deadline, receiver.text()
        time.sleep(0.05)
    # then the real run
    seen = train(sender_config(tmp_path, tensor, [0, 1]), 3)
    assert receiver.wait() == 0, receiver.text()
    for step in (0, 1):
        results = receiver.results(step)
        for api in TRAINING_APIS:
            assert results[api] == ("pass", "pass"), (step, api, results)
        # the replay judged the very inputs of the training: its error is that of float32 against float64
        s = seen[step]
        reference = s["x"].double().numpy() @ s["weight"].double().numpy().T + s["bias"].double().numpy()
        expected = np.max(np.abs(s["y"].double().numpy() - reference))
        got = float(receiver.details(step)["Functional.linear.0.forward.output.0"]["最大绝对误差"])
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-12)
    assert not (receiver.out / "step2").exists()  # capture ended after the last selected step
    summary = receiver.summary()
    assert summary["stopped_ranks"] == [0] and summary["malformed"] >= 1
    assert summary["dropped_by_senders"] == {"0": 0}
    text = receiver.text()
    assert "TLS handshake" in text and "exceeds the maximum" in text
    assert list((tmp_path / "dump").rglob("*.json")) == []  # nothing dumped on the training side


def test_shared_directory_end_to_end(tmp_path, monkeypatch, msprobe_log):
    """The receiver in a thread of this process (its replay still in a worker process)."""
    monkeypatch.setenv("MSPROBE_ONLINE_WORKERS", "1")
    nfs, out = tmp_path / "nfs", tmp_path / "out"
    config = write_json(tmp_path / "r.json", {"task": "run_ut", "run_ut": {"is_online": True, "nfs_path": str(nfs),
                                                                          "black_list": ["pow"]}})
    codes = []
    thread = threading.Thread(target=lambda: codes.append(receive_if_online(str(config), str(out), "cpu")),
                              daemon=True)
    thread.start()
    try:
        train(sender_config(tmp_path, {"nfs_path": str(nfs)}, [1]), 2)
    finally:
        thread.join(60)
    assert codes == [0]
    with open(next((out / "step1" / "rank0").glob("accuracy_checking_result_*.csv")), encoding="utf-8-sig") as f:
        rows = {r["API name"]: r["Forward Test Success"] for r in csv.DictReader(f)}
    assert all(rows[api] == "pass" for api in TRAINING_APIS if api != "Tensor.pow.0")
    assert "Tensor.pow.0" not in rows  # the black list applies online too
    assert json.loads((out / "online_summary.json").read_text())["not_listed"] == 1
    assert not (out / "step0").exists()
    assert os.listdir(nfs) == []  # every file consumed
    finished = [m for m in msprobe_log.messages if "msprobe has finished" in m]
    assert finished and "sent to the run_ut receiver" in finished[-1]
    assert "was written under" not in finished[-1]  # the dump collectors' words: nothing is written here


# A receiver speaking the protocol without replaying (no torch to import: it starts at once), to be killed.
_BARE_RECEIVER = """
import sys, time
from msprobe.core.online.receiver import Intake
from msprobe.core.online.tcp import TcpServer
from msprobe.core.online.wire import Limits
server = TcpServer("127.0.0.1", int(sys.argv[1]), None, Limits(), Intake([0], lambda *record: None))
print("ready", flush=True)
time.sleep(120)
"""


def test_receiver_killed_mid_run_training_finishes_and_logs_drops(tmp_path, msprobe_log):
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", _BARE_RECEIVER, str(port)], stdout=subprocess.PIPE, text=True)
    times = []

    def after(step: int) -> None:
        times.append(time.monotonic())
        if step == 0:
            time.sleep(0.3)  # the sender drains step 0
            receiver.kill()

    try:
        assert receiver.stdout.readline().strip() == "ready"
        train(sender_config(tmp_path, {"host": "127.0.0.1", "port": port, "tls_path": ""}, [0, 1, 2, 3]), 4, after)
    finally:
        receiver.kill()
        receiver.wait(10)
    assert times[-1] - times[0] < 10  # training was not held up by the dead receiver
    text = msprobe_log.text()
    assert "cannot be reached" in text and "records dropped" in text  # a step's warning names its drops
    assert "step 0: " not in text  # step 0 went through before the kill
    summary = re.search(r"sent (\d+) records, dropped (\d+)", text)
    assert summary and int(summary.group(2)) > 0


def test_two_ranks_with_torchrun_into_one_receiver(tmp_path, receivers):
    port = free_port()
    receiver = receivers(tmp_path, {"host": "127.0.0.1", "port": port, "rank_list": [0, 1], "tls_path": ""})
    config = sender_config(tmp_path, {"host": "127.0.0.1", "port": port, "tls_path": ""}, [0])
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(free_port()), str(SCRIPT), str(config), "2"], capture_output=True, text=True,
                         timeout=90)
    assert run.returncode == 0, run.stderr[-3000:]
    assert receiver.wait() == 0, receiver.text()
    for rank in (0, 1):
        assert receiver.results(0, rank)["Functional.linear.0"] == ("pass", "pass")
    assert receiver.summary()["stopped_ranks"] == [0, 1]


# --------------------------------------------------------------------------------- settings checked first
def test_bad_settings_are_refused_before_training(tmp_path, monkeypatch):
    missing = sender_config(tmp_path, {"host": "127.0.0.1", "port": 1, "tls_path": str(tmp_path)}, [0])
    with pytest.raises(ConfigError, match=r"tensor.tls_path.*lacks client.key"):
        PrecisionDebugger(str(missing))
    remote = sender_config(tmp_path, {"host": "10.0.0.1", "port": 1, "tls_path": ""}, [0])
    with pytest.raises(ConfigError, match="not a loopback address"):
        PrecisionDebugger(str(remote))
    level = write_json(tmp_path / "l0.json", {"task": "tensor", "dump_path": str(tmp_path / "d"), "level": "mix",
                                              "tensor": {"online_run_ut": True, "nfs_path": str(tmp_path)}})
    with pytest.raises(ConfigError, match=r"tensor.online_run_ut.*level L1"):
        PrecisionDebugger(str(level))
    monkeypatch.setenv("MSPROBE_ONLINE_QUEUE", "many")
    nfs = sender_config(tmp_path, {"nfs_path": str(tmp_path / "nfs")}, [0])
    with pytest.raises(ConfigError, match=r"MSPROBE_ONLINE_QUEUE.*1..1048576"):
        PrecisionDebugger(str(nfs))


def test_receiver_with_missing_tls_files_exits_2(tmp_path, msprobe_log):
    config = write_json(tmp_path / "r.json", {"task": "run_ut", "run_ut": {
        "is_online": True, "host": "127.0.0.1", "port": free_port(), "tls_path": str(tmp_path)}})
    assert receive_if_online(str(config), str(tmp_path / "out"), "cpu") == 2
    assert "run_ut.tls_path" in msprobe_log.text() and "server.key" in msprobe_log.text()


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:  # the process has gone
        return b""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_receiver_leaves_no_replay_process_behind(tmp_path, receivers):
    receiver = receivers(tmp_path, {"nfs_path": str(tmp_path / "nfs")})
    deadline = time.monotonic() + 60
    # until the replay worker has started
    while not any(b"spawn_main" in _read(f"/proc/{pid}/cmdline") for pid in _children(receiver.process.pid)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    children = _children(receiver.process.pid)
    receiver.kill()
    deadline = time.monotonic() + 20
    while any(_read(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()[:1] not in ([], [b"Z"]) for pid in children):
        assert time.monotonic() < deadline, children
        time.sleep(0.05)


def test_records_carry_the_exact_tensors_and_are_named_by_rank_step_and_sequence(tmp_path):
    """No receiver: the shared directory keeps what the training wrote, read back with the wire format."""
    nfs = tmp_path / "nfs"
    seen = train(sender_config(tmp_path, {"nfs_path": str(nfs)}, [0]), 2)
    names = sorted(os.listdir(nfs), key=lambda n: (n.endswith(".stop"), len(n), n))
    assert names[-1] == "r0.stop" and all(n.startswith("r0_s0_q") and n.endswith(".msg") for n in names[:-1])
    messages = [wire.decode((nfs / n).read_bytes()) for n in names[:-1]]
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    by_name = {m.meta.get("name"): m for m in messages if m.kind == wire.Kind.DATA}
    linear = by_name["Functional.linear.0.forward"]
    assert linear.meta["backward"] is True
    tensors = {t.name: from_wire(t) for t in linear.tensors}
    args = linear.meta["entry"]["input_args"]
    for value, expected in zip(args, (seen[0]["x"], seen[0]["weight"], seen[0]["bias"])):
        assert torch.equal(tensors[value["data_name"]], expected)
    backward = by_name["Functional.linear.0.backward"]
    # the gradient of the output, then those of W and b (x needs none: null in the entry)
    assert [t.shape for t in backward.tensors] == [(5, 16), (16, 8), (16,)]
    assert backward.meta["entry"]["output"][0] is None
    assert messages[-1].kind == wire.Kind.STEP_END
    assert wire.decode((nfs / "r0.stop").read_bytes()).meta == {"sent": len(by_name), "dropped": 0}


@pytest.mark.parametrize("tensor", [
    torch.tensor(3.5), torch.randn(3, 4).bfloat16(), torch.tensor([True, False]), torch.randn(4, 3).t(),
    torch.zeros(0, 3), torch.randn(5).half(), torch.arange(6).reshape(2, 3), torch.randn(2, dtype=torch.complex64),
])
def test_tensor_bytes_round_trip(tensor):
    item = wire_tensor("t", tensor)
    back = from_wire(wire.WireTensor("t", item.dtype, item.shape, bytes(item.data)))
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)
