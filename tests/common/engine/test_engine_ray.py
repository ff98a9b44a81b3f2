"""``--engine ray`` (docs/scale.md): compare gives the rows ``--engine local`` gives, on a Ray started in this
process and on a loopback cluster started with ``ray start``; an unreachable cluster ends the command fast
with exit code 2; a worker killed mid-run is retried and nothing is lost or written twice.

One Ray per module (starting one takes seconds): ``local_ray`` for the in-process runs (in a child session,
tests/common/ray_driver.py), ``cluster`` (a head node on 127.0.0.1) for the command run in a subprocess, as a
user runs it.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
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

from msprobe.core.compare import CompareOptions
from msprobe.core.compare.distributed import DistributedResult, RankSummary, compare_steps
from msprobe.core.compare.pipeline import compare_dumps
from msprobe.core.compare.read.tensorfile import load_npy
from msprobe.core.engine import EngineChoice

ray = pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).parents[1]))  # ray_driver (importlib mode)
sys.path.insert(0, str(Path(__file__).parents[1] / "compare"))  # test_compare_engine's dump writer
import ray_driver  # noqa: E402
from test_compare_engine import write_dump  # noqa: E402

RANKS = 4
CALLS = 20  # forward calls per rank: 40 tensor pairs, several Ray tasks per rank
DIVERGES_AT = {1: 15, 2: 3, 3: 9}  # rank → the call whose output the NPU side gets wrong; rank 0 agrees
TASKS = ("tensor", "statistics")
CLI = ("-m", "msprobe.core", "-f", "mindspore", "compare")  # `msprobe -f mindspore compare`: .npy tensor files


def _dumps(root: Path, task: str) -> Path:
    """npu/step0 and bench/step0 of RANKS ranks; returns compare.json of the two steps."""
    rng = np.random.default_rng(7)
    for rank in range(RANKS):
        bench, npu = [], []
        for i in range(CALLS):
            x = rng.standard_normal((4, 8)).astype(np.float32)
            y = np.tanh(x)
            bench.append((f"Torch.tanh.{i}.forward", [x], [y]))
            npu.append((f"Torch.tanh.{i}.forward", [x], [-y if DIVERGES_AT.get(rank) == i else y]))
        write_dump(root / task / "npu" / "step0" / f"rank{rank}", npu, task=task)
        write_dump(root / task / "bench" / "step0" / f"rank{rank}", bench, task=task)
    config = root / task / "compare.json"
    config.write_text(json.dumps({"npu_path": str(root / task / "npu" / "step0"),
                                  "bench_path": str(root / task / "bench" / "step0")}))
    return config


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ray_compare")
    return {task: _dumps(root, task) for task in TASKS}


def _compare(config: Path, out: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *CLI, "-i", str(config), "-o", str(out), *flags], env=env,
                          capture_output=True, text=True, timeout=120)


def _reports(out: Path) -> dict[str, str]:
    """Every CSV the compare wrote (one per rank, the summary), by name without its timestamp, with the
    summary's report paths made relative."""
    found = {}
    for path in sorted(out.glob("*.csv")):
        text = path.read_text(encoding="utf-8").replace(str(out), "OUT")
        found[re.sub(r"_\d{14}", "", path.name)] = re.sub(r"_\d{14}", "", text)
    return found


def _kept(result: DistributedResult) -> dict[int, tuple]:
    """What the driver kept of each rank, its report paths made relative."""
    return {rank: (s.mode, s.rows, s.failing, s.not_compared, s.first_divergence and s.first_divergence.entry,
                   s.first_divergence and s.first_divergence.excess,
                   sorted(re.sub(r"_\d{14}", "", p.name) for p in s.reports.values()))
            for rank, s in result.ranks.items()}


@pytest.fixture(scope="module")
def local_runs(dumps: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """The local engine's reports of each task (two worker processes) and what it kept of each rank."""
    runs = {}
    for task, config in dumps.items():
        out = tmp_path_factory.mktemp(f"local_{task}")
        result = compare_steps(config.parent / "npu" / "step0", config.parent / "bench" / "step0", out, load_npy,
                               CompareOptions(workers=2, progress=False))
        runs[task] = _reports(out), _kept(result)
        assert len(runs[task][0]) == RANKS + 1 and result.first_rank == 2
    return runs


@pytest.fixture(scope="module")
def local_reports(local_runs: dict[str, tuple[dict, dict]]) -> dict[str, dict[str, str]]:
    return {task: reports for task, (reports, _) in local_runs.items()}


@pytest.fixture(scope="module")
def local_ray():
    """A Ray in this process, which the engine joins (in the module's child session: tests/common/ray_driver.py)."""
    with ray_driver.in_process_ray(__name__):
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """A Ray head node on loopback (tests/common/ray_driver.py) in Ray's own folder, which ``auto`` reads."""
    with ray_driver.loopback_cluster() as found:
        yield found


@pytest.mark.parametrize("task", TASKS)
def test_local_ray_gives_the_local_rows(task, dumps, local_runs, local_ray, tmp_path):
    result = compare_steps(Path(dumps[task]).parent / "npu" / "step0", Path(dumps[task]).parent / "bench" / "step0",
                           tmp_path, load_npy, CompareOptions(progress=False, engine=EngineChoice("ray")))
    assert result.first_rank == 2
    assert _reports(tmp_path) == local_runs[task][0]
    assert _kept(result) == local_runs[task][1]  # the same summaries came back from Ray's tasks


@pytest.mark.parametrize("task", TASKS)
def test_a_rank_unit_hands_back_its_summary_not_its_rows(task, dumps, tmp_path):
    """A rank's summary says what the rank's own compare says and what its CSV holds; pickled (what crosses from
    a worker to the driver), it is a fraction of the rank's rows (docs/scale.md, "1,000 ranks")."""
    root = Path(dumps[task]).parent
    result = compare_steps(root / "npu" / "step0", root / "bench" / "step0", tmp_path / "steps", load_npy,
                           CompareOptions(workers=2, progress=False))
    for rank in range(RANKS):
        one = compare_dumps(root / "npu" / "step0" / f"rank{rank}" / "dump.json",
                            root / "bench" / "step0" / f"rank{rank}" / "dump.json", tmp_path / f"rank{rank}",
                            load_npy, options=CompareOptions(workers=1, progress=False))
        summary = result.ranks[rank]
        assert isinstance(summary, RankSummary)
        assert (summary.rows, summary.failing, summary.not_compared) == \
            (len(one.results), sum(r.failed for r in one.results), one.not_compared)
        with summary.reports["csv"].open(encoding="utf-8", newline="") as table:
            assert len(list(csv.reader(table))) - 1 == summary.rows
        found, expected = summary.first_divergence, one.first_divergence
        assert (found and (found.entry, found.position, found.excess)) == \
            (expected and (expected.entry, expected.position, expected.excess))
        assert (found is None) == (rank not in DIVERGES_AT)
        assert len(pickle.dumps(summary)) < 4096 < len(pickle.dumps(one)) / 2


@pytest.mark.frameworks("mindspore")  # the command as `msprobe -f mindspore` runs it
@pytest.mark.parametrize("task", TASKS)
def test_loopback_cluster_gives_the_local_rows(task, dumps, local_reports, cluster, tmp_path):
    address, env = cluster
    address = address if task == "tensor" else "auto"  # auto: the cluster this machine belongs to
    done = _compare(dumps[task], tmp_path, "--engine", "ray", "--ray-address", address, env=env)
    assert done.returncode == 0, done.stderr
    assert "rank 2 diverged first" in done.stderr
    assert _reports(tmp_path) == local_reports[task]


@pytest.mark.frameworks("mindspore")  # the command as `msprobe -f mindspore` runs it
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_unreachable_cluster_is_exit_2_within_a_minute_naming_it(how, dumps, tmp_path):
    address = f"127.0.0.1:{_free_port()}"  # nobody listens there
    flags = ("--engine", "ray") + (("--ray-address", address) if how == "flag" else ())
    env = {**os.environ, "MSPROBE_RAY_ADDRESS": address}
    started = time.monotonic()
    done = _compare(dumps["statistics"], tmp_path / "out", *flags, env=env)
    assert done.returncode == 2 and time.monotonic() - started < 60
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and address in errors[0], done.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.frameworks("mindspore")  # the command as `msprobe -f mindspore` runs it
def test_ray_address_without_the_ray_engine_is_exit_2(dumps, tmp_path):
    done = _compare(dumps["statistics"], tmp_path, "--ray-address", "auto")
    assert done.returncode == 2 and "--ray-address" in done.stderr and "allowed only with --engine ray" in done.stderr


KILL_AT = "Torch.tanh.12.forward.output.0.npy"


def dies_once(path: Path, spec) -> np.ndarray:
    """The .npy loader, except that the first worker to load KILL_AT (NPU side, rank 1) records its pid and
    waits to be killed; the task's retry finds the record and loads the file."""
    marker = path.parents[4] / "killed.pid"
    if path.name == KILL_AT and path.parts[-3] == "rank1" and path.parts[-5] == "npu":
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            time.sleep(120)
    return load_npy(path, spec)


def _kill_when_recorded(marker: Path, killed: list[int]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if marker.is_file() and marker.read_text():
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.05)


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost_or_written_twice(dumps, local_reports, local_ray,
                                                                                 tmp_path):
    root = Path(dumps["tensor"]).parent
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_recorded, args=(root / "killed.pid", killed))
    killer.start()
    try:
        compare_steps(root / "npu" / "step0", root / "bench" / "step0", tmp_path, dies_once,
                      CompareOptions(progress=False, engine=EngineChoice("ray")))
    finally:
        killer.join()
        (root / "killed.pid").unlink(missing_ok=True)
    assert killed and killed[0] != os.getpid()
    assert _reports(tmp_path) == local_reports["tensor"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 3 * RANKS + 1 and all(re.fullmatch(r"compare_(result_rank\d|summary)_\d{14}\.\w+", n)
                                               for n in names), names


@pytest.mark.frameworks("mindspore")  # the command as `msprobe -f mindspore` runs it
def test_graph_of_a_tensor_compare_on_ray_is_the_local_one(dumps, local_ray, tmp_path):
    from msprobe.core import cli

    root = Path(dumps["tensor"]).parent
    config = tmp_path / "graph.json"
    config.write_text(json.dumps({"npu_path": str(root / "npu" / "step0" / "rank1"),
                                  "bench_path": str(root / "bench" / "step0" / "rank1")}))
    graphs = []
    for engine in ("local", "ray"):
        out = tmp_path / engine
        assert cli.main(["-f", "mindspore", "graph", "-i", str(config), "-o", str(out), "--engine", engine]) == 0
        (vis,) = out.glob("*.vis")
        graphs.append(vis.read_text(encoding="utf-8"))
    assert graphs[0] == graphs[1] and "Torch.tanh.15.forward" in graphs[0]


@pytest.mark.frameworks("mindspore")  # the command as `msprobe -f mindspore` runs it
def test_a_ray_started_for_the_run_gives_the_local_rows(dumps, local_reports, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "MSPROBE_RAY_ADDRESS"}
    done = _compare(dumps["statistics"], tmp_path, "--engine", "ray", env=env)
    assert done.returncode == 0, done.stderr
    assert _reports(tmp_path) == local_reports["statistics"]


def slow_square(x: int, marker: Path | None = None) -> tuple[int, int]:
    """x², and the pid that computed it; with ``marker``, the first call kills its own process (an actor dying
    mid-call)."""
    if marker is not None:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    return x * x, os.getpid()


def test_the_actor_pool_grows_with_the_backlog_to_its_bound_and_survives_a_dead_actor(local_ray, tmp_path):
    from msprobe.core.engine.ray_engine import RayEngine

    pool = RayEngine(ray).executor(2)
    try:
        assert pool.submit(slow_square, 3).result(60)[0] == 9 and pool.actors == 1  # one call: one actor
        assert pool.submit(slow_square, 4).result(60)[0] == 16 and pool.actors == 1  # idle actor reused
        results = [f.result(60) for f in [pool.submit(slow_square, x) for x in range(6)]]
        assert [r[0] for r in results] == [x * x for x in range(6)] and pool.actors == 2  # grew, bounded
        assert len({pid for _, pid in results}) == 2
        marker = tmp_path / "died"
        assert pool.submit(slow_square, 5, marker).result(60)[0] == 25 and marker.exists()  # restarted, re-run
    finally:
        pool.shutdown()


def test_a_units_own_error_is_raised_as_on_the_local_engine(dumps, local_ray, tmp_path):
    from msprobe.core.compare.read.reader import CompareError

    root = Path(dumps["statistics"]).parent
    broken = tmp_path / "npu" / "step0"
    for rank in range(RANKS):
        (broken / f"rank{rank}").mkdir(parents=True)
        (broken / f"rank{rank}" / "dump.json").write_text((root / "npu" / "step0" / f"rank{rank}" / "dump.json")
                                                          .read_text() if rank != 3 else "{not json")
    errors = []
    for engine in ("local", "ray"):
        with pytest.raises(CompareError) as caught:
            compare_steps(broken, root / "bench" / "step0", tmp_path / engine, load_npy,
                          CompareOptions(workers=2, progress=False, engine=EngineChoice(engine)))
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "rank3" in errors[0] and "\n" not in errors[0]


def test_the_in_process_ray_tests_pass_in_a_child_session():
    ray_driver.run_child_session(__file__)
