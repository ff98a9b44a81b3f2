"""Load of online run_ut: at least 10,000 records streamed by a real training loop, on loopback.

A small MLP (12 linear + ReLU layers; 76 records per step with the optimizer's calls) is trained bare,
with ``tensor.online_run_ut`` over plain TCP, TCP+TLS (certificates made with ``openssl``) and a shared
directory, and as a plain tensor dump to disk for comparison. The receiver is a separate process that
takes every message through the real transport, checks it and counts it without replaying (replay
speed is the worker pool's: one API per worker at a time), so the figures are those of the sender and
the transport. Prints per mode: records sent, received, dropped, records/s (received over the time the
training ran with capture on: bounded by how fast this training produces records), the median
training step time with its ratio to the bare run, and what the sender adds to the training per record
the hooks saw (sent or dropped; the step's time over bare, over the records of a step), in wall-clock time, and
the CPU time over bare per record of the training thread (the hooks: snapshot and description) and of the
process's other threads (the sender thread: encoding and sending; the run's total CPU, draining included — less
sensitive to other jobs on the machine than wall-clock time); then the capacity of each transport alone (10,000
ready messages, no training next to the sending thread).

    python tools/bench/online_load.py [--steps 140] [--modes tcp,tls,nfs,disk]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "tests" / "common"))
from harness import time_steps  # noqa: E402
from online_tls import make_tls  # noqa: E402

# The receiver process: the real transport and intake, each record counted instead of replayed.
RECEIVER = """
import json, sys, threading
from msprobe.core.online.receiver import Intake
from msprobe.core.online.tcp import DirWatcher, TcpServer, tls_context
from msprobe.core.online.wire import Limits
mode, where, tls = sys.argv[1], sys.argv[2], sys.argv[3]
counted = []
intake = Intake([0], lambda rank, step, forward, backward: counted.append(1 + (backward is not None)))
if mode == "nfs":
    transport = DirWatcher(where, Limits(), intake, poll=0.01)
else:
    context = tls_context(tls, "127.0.0.1", server=True, field="tls_path")
    transport = TcpServer("127.0.0.1", int(where), context, Limits(), intake)
print("ready", flush=True)
while not intake.done:
    threading.Event().wait(0.05)
print(json.dumps({"received": sum(counted), "malformed": intake.counts["malformed"]}), flush=True)
threading.Event().wait()  # the transport stays open (STOP's answer may still be on its way): the bench kills us
"""


TRANSPORTS = ("tcp", "tls", "nfs")


def model_and_step() -> tuple[nn.Module, callable]:
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [nn.Linear(32, 32), nn.ReLU()]
    model = nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train_step(batch: torch.Tensor) -> None:
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    return model, train_step


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_mode(mode: str, steps: int, scratch: Path, tls: dict[str, Path] | None) -> dict:
    model, train_step = model_and_step()
    batches = [torch.randn(16, 32) for _ in range(steps)]
    if mode in ("bare", "disk"):  # disk: the offline alternative, a task tensor dump, for comparison
        debugger = None
        if mode == "disk":
            config = scratch / "disk.json"
            config.write_text(json.dumps({"task": "tensor", "level": "L1", "dump_path": str(scratch / "dump-disk")}))
            debugger = PrecisionDebugger(str(config))
        return timed(batches, train_step, debugger, model)
    where = str(scratch / f"nfs-{mode}") if mode == "nfs" else str(free_port())
    tensor = {"nfs_path": where} if mode == "nfs" else {
        "host": "127.0.0.1", "port": int(where), "tls_path": str(tls["sender"]) if mode == "tls" else ""}
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, mode, where,
                                 str(tls["receiver"]) if mode == "tls" else ""], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        config = scratch / f"{mode}.json"
        config.write_text(json.dumps({"task": "tensor", "level": "L1", "dump_path": str(scratch / f"dump-{mode}"),
                                      "tensor": {"online_run_ut": True, **tensor}}))  # every step
        debugger = PrecisionDebugger(str(config))
        begin = time.perf_counter()
        times = timed(batches, train_step, debugger, model)  # finish() waits for the queue and the STOP answer
        elapsed = time.perf_counter() - begin
        sender = debugger._runner.collector.sender
        counts = json.loads(receiver.stdout.readline())
    finally:
        receiver.kill()
        receiver.wait(10)
    return {"sent": sender.sent, "dropped": sender.dropped, **counts,
            "records_per_s": counts["received"] / elapsed, **times}


def timed(batches: list, train_step: callable, debugger: PrecisionDebugger | None, model: nn.Module) -> dict:
    """The median step (wall-clock ms), and per step the CPU ms of this (the training) thread and of the
    process's other threads, the debugger's ``finish`` included."""
    process, thread = time.process_time(), time.thread_time()
    samples = time_steps(batches, train_step, debugger, model)
    if debugger is not None:
        debugger.finish()
    process, thread = time.process_time() - process, time.thread_time() - thread
    return {"step_ms": statistics.median(s[0] for s in samples) * 1000,
            "thread_ms": thread * 1000 / len(batches), "others_ms": (process - thread) * 1000 / len(batches)}


def transport_capacity(mode: str, count: int, scratch: Path, tls: dict[str, Path] | None) -> float:
    """Records/s of the transport alone: ``count`` ready messages (a 512-float tensor each) from a link to
    the receiver process, with no training next to the sending thread."""
    from msprobe.core.online import wire
    from msprobe.core.online.tcp import DirLink, TcpLink, tls_context

    where = str(scratch / f"capacity-{mode}") if mode == "nfs" else str(free_port())
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, mode, where,
                                 str(tls["receiver"]) if mode == "tls" else ""], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        if mode == "nfs":
            link = DirLink(where)
        else:
            context = tls_context(str(tls["sender"]), "127.0.0.1", server=False, field="tls_path") if mode == "tls" \
                else None
            link = TcpLink("127.0.0.1", int(where), context, rank=0)
        data = torch.zeros(512).numpy().tobytes()
        frames = []
        for seq in range(1, count + 1):
            frame = wire.encode(wire.Message(wire.Kind.DATA, 0, 0, seq, {"name": f"Torch.add.{seq}.forward",
                                                                         "entry": {}, "backward": False},
                                             [wire.WireTensor("x", "float32", (512,), data)]))
            frames.append((wire.parse_header(frame[:wire.HEADER.size]), frame))
        begin = time.perf_counter()
        link.open()
        for start in range(0, count, 64):
            link.send(frames[start:start + 64])
        link.stop(0, 0, count + 1, {"sent": count, "dropped": 0})
        counts = json.loads(receiver.stdout.readline())  # every message taken by the receiver
        elapsed = time.perf_counter() - begin
        link.close()
    finally:
        receiver.kill()
        receiver.wait(10)
    assert counts["received"] == count, counts
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=140, help="training steps per mode (76 records each)")
    parser.add_argument("--modes", default="tcp,tls,nfs,disk",
                        help="comma-separated: tcp, tls, nfs, disk (a tensor dump to disk, for comparison)")
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.WARNING)
    scratch = Path(tempfile.mkdtemp(prefix="msprobe-online-bench-"))
    try:
        modes = ["bare", *args.modes.split(",")]
        tls = make_tls(scratch / "tls") if "tls" in modes else None
        results = {mode: run_mode(mode, args.steps, scratch, tls) for mode in modes}
        capacity = {mode: transport_capacity(mode, 10_000, scratch, tls) for mode in modes if mode in TRANSPORTS}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    bare = results["bare"]
    print(f"{'mode':6} {'sent':>7} {'received':>9} {'dropped':>8} {'records/s':>10} {'step ms':>8} {'ratio':>6} "
          f"{'us/record':>10} {'hooks cpu us':>13} {'sender cpu us':>14}")
    for mode, r in results.items():
        per_step = (r.get("sent", 0) + r.get("dropped", 0)) / args.steps  # the records the hooks saw in a step
        added = "".join(f" {(r[key] - bare[key]) * 1000 / per_step:>{width}.1f}" for key, width in
                        (("step_ms", 10), ("thread_ms", 13), ("others_ms", 14))) if per_step else ""
        print(f"{mode:6} {r.get('sent', 0):>7} {r.get('received', 0):>9} {r.get('dropped', 0):>8} "
              f"{r.get('records_per_s', 0):>10.0f} {r['step_ms']:>8.2f} {r['step_ms'] / bare['step_ms']:>6.2f}{added}")
    print(f"(torch {torch.__version__}, {os.cpu_count()} CPUs, {args.steps} steps per mode)")
    print("transport alone, 10,000 ready messages of 2 KiB: " +
          ", ".join(f"{mode} {rate:.0f} records/s" for mode, rate in capacity.items()))


if __name__ == "__main__":
    main()
