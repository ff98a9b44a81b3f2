"""``multi_run_ut --engine ray`` (docs/scale.md): one rank's APIs partitioned over Ray workers give the rows the
local processes give, on a loopback cluster, where ``-csv_path`` resumes a local run; a part whose worker is
killed mid-run is re-run from an empty folder, so no API is lost or reported twice; parts on accelerators hold
one device each that Ray assigned and made visible (a Ray that declares GPUs and NPUs it does not have: the
replay itself runs on the CPU here). The online receiver's replays on Ray actors give the local receiver's reports;
its actors hold devices by the same rule as the parts.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray_driver
from test_online_run_ut import sender_config, train, write_json
from test_run_ut import _dump, _one, _rows

from msprobe.core import cli
from msprobe.core.engine import ACCELERATORS, VISIBILITY, Accelerators, EngineChoice, EngineError
from msprobe.core.engine.ray_engine import device_name
from msprobe.core.online.receiver import Intake, Receiver, ReplayPool
from msprobe.core.online.tcp import DirWatcher
from msprobe.core.online.wire import Limits
from msprobe.core.run_ut.parallel import offered, run_parts
from msprobe.core.run_ut.replay_common import rows_to_check
from msprobe.pytorch.online.receive import receive_if_online
from msprobe.pytorch.online.replay import replay_frames
from msprobe.pytorch.run_ut import multi
from msprobe.pytorch.run_ut.replay import DEFAULT_SEED

ray = pytest.importorskip("ray")

_TEXT = ("API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "Status", "Standard", "Stage1 Status")
DECLARED = {"cuda": ("3", "5"), "npu": ("4", "6")}  # the devices the module's Ray declares, as its node numbers them


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _dump(tmp_path_factory.mktemp("ray_run_ut_dump"), "tensor")


def _report(folder: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The result rows, and the details rows without their numbers: a part's error measures depend on its
    process's thread count (Ray gives a one-CPU task one thread), which orders an fp32 reduction."""
    details = _rows(_one(folder, "accuracy_checking_details_*.csv"))
    return (_rows(_one(folder, "accuracy_checking_result_*.csv")),
            [{key: row[key] for key in _TEXT} for row in details])


@pytest.fixture(scope="module")
def local_run(dump: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run_ut of the dump on the local engine (its rows are multi_run_ut's: tests/pytorch/test_multi_run_ut.py)."""
    out = tmp_path_factory.mktemp("local")
    assert cli.main(["-f", "pytorch", "run_ut", "-api_info", str(dump), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def local(local_run: Path) -> tuple:
    return _report(local_run)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A token-authenticated Ray head on loopback (tests/common/ray_driver.py)."""
    with ray_driver.loopback_cluster(tmp_path_factory.mktemp("ray_head")) as found:
        yield found


def test_loopback_cluster_resumes_a_local_run(dump, local_run, local, cluster, tmp_path):
    address, env = cluster
    for report in local_run.glob("accuracy_checking_*.csv"):
        shutil.copy(report, tmp_path)
    result = _one(tmp_path, "accuracy_checking_result_*.csv")
    lines = result.read_text(encoding="utf-8").splitlines(keepends=True)
    result.write_text("".join(lines[:4]), encoding="utf-8")  # header + 3 APIs: interrupted
    done = subprocess.run([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "multi_run_ut", "-api_info",
                           str(dump), "-csv_path", str(result), "-n", "2", "--engine", "ray", "--ray-address",
                           address], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _report(tmp_path) == local  # the first three APIs from run_ut, the rest from the cluster, each once


def dies_once(marker: Path, runner, part_dir: str, apis: list[str], device: str) -> tuple[int, str | None]:
    """The part runner, except that the first part to run leaves a half-written report in its folder,
    records its pid and waits to be killed; the retry finds the record and runs."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return runner(part_dir, apis, device)
    Path(part_dir).mkdir(parents=True)
    (Path(part_dir) / "accuracy_checking_result_19990101000000.csv").write_text("API name\nTorch.bogus.0\n")
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    time.sleep(120)
    raise AssertionError("not killed")


def _kill_when_recorded(marker: Path, killed: list[int]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if marker.is_file() and marker.read_text():
            killed.append(int(marker.read_text()))
            os.kill(killed[0], signal.SIGKILL)
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def local_ray():
    """A Ray in this process, which the engine joins (in the module's child session: tests/common/ray_driver.py),
    declaring two GPUs and two NPUs numbered as ``DECLARED`` says."""
    visible = {VISIBILITY[kind]: ",".join(ids) for kind, ids in DECLARED.items()}
    with ray_driver.in_process_ray(__name__, visible, num_gpus=len(DECLARED["cuda"]),
                                   resources={ACCELERATORS["npu"]: len(DECLARED["npu"])}):
        yield


def _runner(dump: Path):
    """multi_run_ut's own part runner for ``dump``."""
    return functools.partial(multi._run_part, str(dump), False, DEFAULT_SEED, False)


def test_a_part_killed_mid_run_is_rerun_from_an_empty_folder(dump, local, local_ray, tmp_path):
    marker = tmp_path / "killed.pid"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_recorded, args=(marker, killed))
    killer.start()
    try:
        run_parts(functools.partial(dies_once, marker, _runner(dump)), rows_to_check(dump, None, (), (), False),
                  tmp_path / "out", parts=2, devices=["cpu"], engine=EngineChoice("ray"))
    finally:
        killer.join()
    assert killed and killed[0] != os.getpid()
    assert _report(tmp_path / "out") == local


def told_then_on_cpu(record: Path, runner, part_dir: str, apis: list[str], device: str) -> tuple[int, str | None]:
    """The part runner, after recording what the part was told — its device, the visibility variables it saw, the
    ids Ray assigned it — and waiting for the other part's record (so both held their devices at once); then the
    replay on the CPU, as there is no accelerator here."""
    from ray import get_runtime_context

    told = {"device": device, "seen": {v: os.environ.get(v) for v in VISIBILITY.values()},
            "ids": get_runtime_context().get_accelerator_ids()}
    (record / f"{os.getpid()}.tmp").write_text(json.dumps(told))
    (record / f"{os.getpid()}.tmp").rename(record / f"{os.getpid()}.json")
    deadline = time.monotonic() + 60
    while len(list(record.glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return runner(part_dir, apis, "cpu")


@pytest.mark.parametrize("kind", sorted(DECLARED))
def test_parts_on_accelerators_hold_distinct_devices_that_ray_made_visible(kind, dump, local, local_ray, tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    run_parts(functools.partial(told_then_on_cpu, record, _runner(dump)), rows_to_check(dump, None, (), (), False),
              tmp_path / "out", parts=2, devices=[f"{kind}:{i}" for i in DECLARED[kind]], engine=EngineChoice("ray"))
    told = [json.loads(path.read_text()) for path in sorted(record.glob("*.json"))]
    assigned = [part["ids"][ACCELERATORS[kind]] for part in told]
    assert sorted(ids[0] for ids in assigned) == sorted(DECLARED[kind]) and all(len(ids) == 1 for ids in assigned)
    for part, (device_id,) in zip(told, assigned):
        assert part["seen"][VISIBILITY[kind]] == device_id  # Ray made the part's device its only visible one
        assert part["device"] == f"{kind}:0"  # which is the part's process's first device
        other = next(k for k in DECLARED if k != kind)
        assert part["ids"][ACCELERATORS[other]] == [] and part["seen"][VISIBILITY[other]] == ",".join(DECLARED[other])
    assert _report(tmp_path / "out") == local


def test_a_device_that_d_does_not_offer_is_refused(dump, local_ray, tmp_path):
    with pytest.raises(EngineError, match=r"but -d offers 7: start each node's Ray with only the devices"):
        run_parts(_runner(dump), rows_to_check(dump, None, (), (), False)[:1], tmp_path / "out", parts=1,
                  devices=["cuda:7"], engine=EngineChoice("ray"))
    assert not list((tmp_path / "out").iterdir())  # the part's folder is removed


def test_a_ray_started_for_the_run_offers_the_devices_d_names(dump, tmp_path):
    """``-d cuda:2 cuda:6`` on a machine without CUDA: the command's own Ray declares GPUs 2 and 6, each part asks
    it for one and replays on it as ``cuda:0`` — which torch here refuses (only a GPU node can run it), and the
    part's error says which device of which node it was given."""
    env = {k: v for k, v in os.environ.items() if k not in ("MSPROBE_RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")}
    done = subprocess.run([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "multi_run_ut", "-api_info",
                           str(dump), "-o", str(tmp_path), "-n", "2", "-d", "cuda:2", "cuda:6", "--engine", "ray"],
                          env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    given = re.findall(r"part (\d): on cuda device (\d) of node [\d.]+ \(cuda:0 in the part\): -d cuda:0: no such CUDA "
                       r"device here", errors[0])
    assert sorted(part for part, _ in given) == ["0", "1"] and {device for _, device in given} <= {"2", "6"}, errors


def test_rays_assignment_names_the_device_the_replay_uses():
    assert device_name("cuda", "5", "5") == "cuda:0"  # Ray made it the only visible device
    assert device_name("npu", "6", "4, 6") == "npu:1"  # RAY_EXPERIMENTAL_NOSET_*: the node's own list
    assert device_name("cuda", "5", None) == "cuda:5"
    with pytest.raises(EngineError, match="not visible"):
        device_name("cuda", "5", "3")
    assert Accelerators.of(["cuda:0", "cuda:1"]) == Accelerators("cuda", ("0", "1"))
    assert Accelerators.of(["npu"]) == Accelerators("npu") and Accelerators.of(["cpu"]) is None
    for mixed in (["cpu", "cuda:0"], ["cuda:0", "npu:1"], ["cuda:x"], ["mps:0"]):
        with pytest.raises(EngineError, match="give devices of one kind"):
            Accelerators.of(mixed)


def _online(tmp: Path, engine: EngineChoice) -> Path:
    """Two training steps sending their APIs through a shared directory to a receiver in a thread here."""
    nfs, out = tmp / "nfs", tmp / "out"
    tmp.mkdir()
    config = write_json(tmp / "receiver.json", {"task": "run_ut", "run_ut": {"is_online": True,
                                                                             "nfs_path": str(nfs)}})
    codes: list[int | None] = []
    thread = threading.Thread(target=lambda: codes.append(receive_if_online(str(config), str(out), "cpu", engine)))
    thread.start()
    try:
        train(sender_config(tmp, {"nfs_path": str(nfs)}, [0, 1]), 2)
    finally:
        thread.join(120)
    assert codes == [0]
    return out


@pytest.fixture(scope="module")
def online_local(local_ray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local receiver's reports of :func:`_online`'s run, with one replay process."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MSPROBE_ONLINE_WORKERS", "1")
        return _online(tmp_path_factory.mktemp("online") / "local", EngineChoice("local"))


def test_online_replays_on_ray_actors_give_the_local_reports(online_local, local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("MSPROBE_ONLINE_WORKERS", "2")  # on Ray, at most two actors, grown as records queue up
    _assert_same_online_reports([online_local, _online(tmp_path / "ray", EngineChoice("ray"))])


def _records(tmp: Path) -> Path:
    """The shared directory of :func:`_online`'s two training steps, before any receiver reads it."""
    tmp.mkdir()
    train(sender_config(tmp, {"nfs_path": str(tmp / "nfs")}, [0, 1]), 2)
    return tmp / "nfs"


def told(record: Path, device: str) -> None:
    """An actor's initializer: what it was told — its device, the visibility variables it sees, the ids Ray assigned
    it — recorded (the replay itself runs on the CPU, as there is no accelerator here)."""
    from ray import get_runtime_context

    told = {"device": device, "seen": {v: os.environ.get(v) for v in VISIBILITY.values()},
            "ids": get_runtime_context().get_accelerator_ids()}
    (record / f"{os.getpid()}.tmp").write_text(json.dumps(told))
    (record / f"{os.getpid()}.tmp").rename(record / f"{os.getpid()}.json")


def on_cpu_once_both_told(record: Path, forward: bytes, backward: bytes | None, *, device: str):
    """The replay of a record on the CPU, its actor's first one only once the other actor was told its device too
    (so both held their devices at once; the first record keeps the first actor busy, so the pool grows)."""
    deadline = (record / f"{os.getpid()}.json").stat().st_mtime + 30
    while len(list(record.glob("*.json"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    return replay_frames(forward, backward, device="cpu", max_message_mb=64)


@pytest.mark.parametrize("kind", ["npu"])  # cuda: the next test but one (a Ray started for the command)
def test_online_actors_on_accelerators_hold_distinct_devices_that_ray_made_visible(kind, online_local, local_ray,
                                                                                   tmp_path):
    """The receiver's pieces as ``receive`` joins them, with ``-d`` naming the module Ray's two devices of ``kind``."""
    nfs, record, out = _records(tmp_path / "sent"), tmp_path / "record", tmp_path / "out"
    record.mkdir()
    ray_engine = EngineChoice("ray")
    pool = ReplayPool(2, functools.partial(on_cpu_once_both_told, record), functools.partial(told, record),
                      ray_engine, offered([f"{kind}:{i}" for i in DECLARED[kind]], ray_engine))
    intake = Intake([0], pool.submit)
    watcher = DirWatcher(str(nfs), Limits.from_megabytes(64), intake)
    try:
        Receiver(out, intake, pool, {"device": kind, "mode": "online"}).run()
    finally:
        watcher.close()
        pool.close()
    told_ = [json.loads(path.read_text()) for path in sorted(record.glob("*.json"))]
    assigned = [actor["ids"][ACCELERATORS[kind]] for actor in told_]
    assert sorted(ids[0] for ids in assigned) == sorted(DECLARED[kind]) and all(len(ids) == 1 for ids in assigned)
    for actor, (device_id,) in zip(told_, assigned):
        assert actor["seen"][VISIBILITY[kind]] == device_id and actor["device"] == f"{kind}:0"
        other = next(k for k in DECLARED if k != kind)
        assert actor["ids"][ACCELERATORS[other]] == [] and actor["seen"][VISIBILITY[other]] == ",".join(DECLARED[other])
    _assert_same_online_reports([online_local, out])


def test_an_online_actor_given_a_device_that_d_does_not_offer_ends_the_run(local_ray, tmp_path):
    nfs = _records(tmp_path / "sent")
    config = write_json(tmp_path / "receiver.json", {"task": "run_ut", "run_ut": {"is_online": True,
                                                                                  "nfs_path": str(nfs)}})
    with pytest.raises(EngineError, match=r"Ray gave a unit cuda device\(s\) \['[35]'\] on node [\d.]+, but -d "
                                          r"offers 7: start each node's Ray with only the devices"):
        receive_if_online(str(config), str(tmp_path / "out"), ["cuda:7"], EngineChoice("ray"))


def _assert_same_online_reports(outs: list[Path]) -> None:
    for step in (0, 1):  # rows in the order their replays ended, which two workers of either engine vary
        reports = [[sorted(rows, key=lambda row: str(sorted(row.items()))) for rows in _report(out / f"step{step}"
                                                                                         / "rank0")] for out in outs]
        assert reports[0] == reports[1] and len(reports[0][0]) >= 5
    summaries = [json.loads((out / "online_summary.json").read_text()) for out in outs]
    for key in ("records", "replayed", "checked", "malformed", "stopped_ranks"):
        assert summaries[0][key] == summaries[1][key], key


def _online_by_command(tmp: Path, *flags: str, env: dict[str, str]) -> tuple[Path, str]:
    """Two training steps here, sending their APIs through a shared directory to a receiver started as a user
    starts it (``msprobe -f pytorch run_ut -config``) with ``flags``."""
    nfs, out = tmp / "nfs", tmp / "out"
    tmp.mkdir()
    config = write_json(tmp / "receiver.json", {"task": "run_ut", "run_ut": {"is_online": True,
                                                                             "nfs_path": str(nfs)}})
    receiver = subprocess.Popen([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "run_ut", "-config",
                                 str(config), "-o", str(out), *flags], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        train(sender_config(tmp, {"nfs_path": str(nfs)}, [0, 1]), 2)
        output, _ = receiver.communicate(timeout=300)
    finally:
        if receiver.poll() is None:
            receiver.kill()
    assert receiver.returncode == 0, output
    return out, output


def test_online_replays_on_a_loopback_cluster_give_the_local_reports(cluster, tmp_path):
    """The receiver joins a ``ray start`` cluster (its Ray driver is the command's process, not this one)."""
    address, env = cluster
    local, _ = _online_by_command(tmp_path / "local", env={**os.environ, "MSPROBE_ONLINE_WORKERS": "1"})
    on_ray, output = _online_by_command(tmp_path / "ray", "--engine", "ray", "--ray-address", address,
                                        env={**env, "MSPROBE_ONLINE_WORKERS": "2"})
    assert f"engine ray: 2.0 CPUs at {address}" in output  # the cluster's two CPUs, not a Ray of its own
    _assert_same_online_reports([local, on_ray])


def test_an_online_receiver_started_with_d_offers_its_ray_those_devices(tmp_path):
    """``run_ut -config online.json -d cuda:2 cuda:6 --engine ray`` on a machine without CUDA: the command's own Ray
    declares GPUs 2 and 6, the first actor asks it for one and is told ``cuda:0``, which torch here cannot open (only
    a GPU node can replay there): the run ends before replaying, exit 2, naming the device and node."""
    nfs = _records(tmp_path / "sent")
    config = write_json(tmp_path / "receiver.json", {"task": "run_ut", "run_ut": {"is_online": True,
                                                                                  "nfs_path": str(nfs)}})
    env = {k: v for k, v in os.environ.items() if k not in ("MSPROBE_RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")}
    done = subprocess.run([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "run_ut", "-config", str(config),
                           "-o", str(tmp_path / "out"), "-d", "cuda:2", "cuda:6", "--engine", "ray"],
                          env={**env, "MSPROBE_ONLINE_WORKERS": "1"}, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert re.search(r"a worker on cuda device [26] of node [\d.]+ \(cuda:0 in the worker\) cannot start: -d cuda:0: "
                     r"no such CUDA device here", errors[0]), errors
    assert not (tmp_path / "out" / "step0").exists()  # nothing replayed


def test_the_in_process_ray_tests_pass_in_a_child_session():
    ray_driver.run_child_session(__file__)
