"""Grad probe, framework-free half: summary layout, settings validation, the monitor's bookkeeping (on numpy),
and run-to-run comparison."""

from __future__ import annotations

import csv
import logging
import types
import zlib
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.grad_probe import (
    GradComparator,
    GradCompareError,
    GradMonitorBase,
    GradProbeSettings,
    compare_command,
    interval_labels,
    stat_width,
    statistics_parts,
    summary_header,
    write_step,
)
from msprobe.core.grad_probe.summary import safe_file_stem

SHAPES = {"embed.weight": (6, 5), "fc.weight": (4, 3), "fc.bias": (4,)}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _settings(path: Path, level: str = "L2", bounds=(-1, 0, 1)) -> GradProbeSettings:
    return GradProbeSettings.create(str(path), level, [], list(bounds), [], [])


def _write_run(root: Path, signs_per_step: list[dict[str, np.ndarray]], rank: int = 0) -> None:
    """A grad-probe output written through the real writer (statistics are placeholders here)."""
    settings = _settings(root, "L1")
    for step, signs in enumerate(signs_per_step):
        names = list(signs)
        stats = np.zeros((len(names), 3))
        flat = np.concatenate([signs[n].reshape(-1) for n in names])
        write_step(settings, rank, step, names, [signs[n].shape for n in names], stats, signs=flat)


def _random_signs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {name: rng.random(shape) > 0.5 for name, shape in SHAPES.items()}


def _flip(signs: dict[str, np.ndarray], fraction: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {name: np.where(rng.random(a.shape) < fraction, ~a, a) for name, a in signs.items()}


def _read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


# --- summary layout ---------------------------------------------------------------------------------

def test_headers_follow_the_level_table_and_match_1_1_1_files():
    # Header of msprobe 1.1.1's pt_grad_probe_L2/rank0/grad_summary_0.csv (bounds [-0.01, 0, 0.01]).
    assert summary_header("L2", [-0.01, 0.0, 0.01]) == [
        "param_name", "(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0",
        "max", "min", "norm", "shape",
    ]
    assert interval_labels([-1.0, 0.0, 1.0]) == ["(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)"]
    assert interval_labels([2.5]) == ["(-inf, 2.5]", "(2.5, inf)"]
    assert summary_header("L1", [1]) == ["param_name", "max", "min", "norm", "shape"]
    assert summary_header("L0", [1]) == ["param_name", "MD5", "max", "min", "norm", "shape"]


def test_write_step_turns_counts_into_fractions_and_checksums(tmp_path):
    grad = np.array([[-2.0, -0.5, 0.0], [0.0, 0.5, 3.0]], dtype=np.float32)
    # [max, min, norm, count<=-1, count<=0, count<=1, count>1, count==0]
    stats = np.array([[3.0, -2.0, 1.0, 1, 4, 5, 1, 2]])
    csv_path = write_step(_settings(tmp_path), 0, 7, ["w"], [(2, 3)], stats, signs=(grad > 0).reshape(-1))
    assert csv_path == tmp_path / "rank0" / "grad_summary_7.csv"
    assert _read_csv(csv_path)[1] == ["w", str(1 / 6), str(3 / 6), str(1 / 6), str(1 / 6), str(2 / 6),
                                      "3.0", "-2.0", "1.0", "[2, 3]"]
    np.testing.assert_array_equal(np.load(tmp_path / "rank0" / "step7" / "w.npy"), grad > 0)

    l0 = _settings(tmp_path / "l0", "L0")
    write_step(l0, 0, 0, ["w"], [(2, 3)], stats[:, :3], values=grad.reshape(-1))
    row = _read_csv(tmp_path / "l0" / "rank0" / "grad_summary_0.csv")[1]
    assert row[1] == f"{zlib.crc32(grad.tobytes()):08x}"
    assert not (tmp_path / "l0" / "rank0" / "step0").exists()


def test_settings_report_every_problem_at_once(tmp_path):
    with pytest.raises(ValueError) as raised:
        GradProbeSettings.create(str(tmp_path), "L3", ["fc", ""], [1, 0], [0, -1], ["a"])
    message = str(raised.value)
    for expected in ("grad_level='L3'", "L0, L1, L2", "param_list=", "bounds=[1, 0]", "strictly increasing",
                     "steps[1]=-1", "ranks[0]='a'"):
        assert expected in message
    with pytest.raises(ValueError, match=r"bounds\[0\]=nan"):
        GradProbeSettings.create(str(tmp_path), "L1", [], [float("nan")], [], [])


def test_settings_select_steps_ranks_and_parameters(tmp_path):
    settings = GradProbeSettings.create(str(tmp_path), "L1", ["fc.weight", "conv"], [0], [1, 3], [0])
    assert settings.records(1, 0) and settings.records(3, 0)
    assert not settings.records(2, 0) and not settings.records(1, 1)
    assert settings.selects("fc.weight") and settings.selects("block.conv.bias")
    assert not settings.selects("fc.bias")
    assert settings.unmatched_entries(["fc.weight", "fc.bias"]) == ["conv"]


def test_file_stems_are_safe():
    assert safe_file_stem("layers.0.weight") == "layers.0.weight"
    assert safe_file_stem("../etc/passwd") == ".._etc_passwd"
    assert safe_file_stem("..") == "__"


# --- the monitor's framework-free half, driven by numpy "tensors" ---------------------------------------

class _NumpyGradMonitor(GradMonitorBase):
    """The framework half of a gradient monitor, in numpy: what torch/MindSpore do on their device."""

    rank_lookup = staticmethod(lambda: None)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.params: dict[str, np.ndarray] = {}
        self.hook = types.SimpleNamespace(removed=0)
        self.hook.remove = lambda: setattr(self.hook, "removed", self.hook.removed + 1)

    def monitor(self, params: dict[str, np.ndarray]) -> None:
        names = list(params)
        self.params = {names[i]: params[names[i]] for i in self._select(names, "model")}
        self._hooks.add(self.hook)

    def optimizer_step(self, run: bool = True) -> None:
        self._step_begins(lambda: [(n, g) for n, g in self.params.items() if g.size])
        if run:  # a skipped update (inf/NaN under a loss scaler) never calls the hook after it
            self._step_done()

    def _reduce(self, grads, bounds, signs, values):
        stats = np.stack([np.array(statistics_parts(g, np.linalg.norm(g), bounds), dtype=np.float64) for g in grads])
        flat = [g.reshape(-1) for g in grads]
        return (stats, np.concatenate([f > 0 for f in flat]) if signs else None,
                np.concatenate([f.astype(np.float32) for f in flat]) if values else None)

    def _to_host(self, tensor):
        return np.asarray(tensor)


def test_statistics_parts_follow_the_layout_of_stat_width():
    grad = np.array([[-2.0, -0.5, 0.0], [0.0, 0.5, 3.0]])
    parts = statistics_parts(grad, np.linalg.norm(grad), [-1.0, 0.0, 1.0])
    assert len(parts) == stat_width("L2", [-1.0, 0.0, 1.0])
    assert [float(p) for p in parts] == [3.0, -2.0, float(np.linalg.norm(grad)), 1, 4, 5, 1, 2]
    assert len(statistics_parts(grad, 0.0, None)) == stat_width("L1", [-1.0, 0.0, 1.0]) == 3


def test_monitor_base_selects_counts_steps_and_writes_only_completed_updates(tmp_path, msprobe_log):
    rng = np.random.default_rng(3)
    params = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}
    params["empty.bias"] = np.zeros((0,), dtype=np.float32)
    monitor = _NumpyGradMonitor(str(tmp_path), "L2", ["fc", "empty", "decoder"], [-1.0, 0.0, 1.0], [0, 1, 3], [])
    monitor.monitor(params)
    assert "param_list entry 'decoder' matches no parameter of the model" in msprobe_log.text()
    with pytest.raises(RuntimeError, match="already called"):
        monitor.monitor(params)
    monitor.optimizer_step()
    monitor.optimizer_step(run=False)  # skipped: neither written nor counted
    monitor.optimizer_step()  # step 1
    monitor.optimizer_step()  # step 2: not selected
    assert monitor.step == 3
    monitor.close()
    monitor.close()
    assert monitor.hook.removed == 1
    rank_dir = tmp_path / "rank0"
    assert sorted(p.name for p in rank_dir.iterdir()) == ["grad_summary_0.csv", "grad_summary_1.csv", "step0",
                                                          "step1"]
    rows = _read_csv(rank_dir / "grad_summary_1.csv")
    assert [r[0] for r in rows[1:]] == ["fc.weight", "fc.bias"]  # in order; the empty gradient is left out
    grad = params["fc.weight"].astype(np.float64)
    assert [float(v) for v in rows[1][1:6]] == pytest.approx(
        [np.mean(grad <= -1), np.mean((grad > -1) & (grad <= 0)), np.mean((grad > 0) & (grad <= 1)),
         np.mean(grad > 1), np.mean(grad == 0)], abs=1e-15)
    np.testing.assert_array_equal(np.load(rank_dir / "step1" / "fc.bias.npy"), params["fc.bias"] > 0)
    monitor.monitor(params)  # after close() it may monitor again
    monitor.close()


def test_monitor_base_l0_checksums_and_an_empty_selection(tmp_path, msprobe_log):
    grads = {"w": np.array([[1.0, -2.0]], dtype=np.float32)}
    monitor = _NumpyGradMonitor(str(tmp_path), "L0", [], [0.0], [], [])
    monitor.monitor(grads)
    monitor.optimizer_step()
    row = _read_csv(tmp_path / "rank0" / "grad_summary_0.csv")[1]
    assert row[:2] == ["w", f"{zlib.crc32(grads['w'].tobytes()):08x}"]
    nothing = _NumpyGradMonitor(str(tmp_path / "none"), "L1", ["absent"], [0.0], [], [])
    nothing.monitor(grads)
    nothing.optimizer_step()
    assert nothing.step == 1 and not (tmp_path / "none").exists()
    assert "no parameter selected" in msprobe_log.text()


# --- comparison --------------------------------------------------------------------------------------

def test_compare_two_runs_checks_values_files_and_first_diverging_step(tmp_path, msprobe_log):
    rng = np.random.default_rng(0)
    run_a = [_random_signs(rng) for _ in range(4)]
    # step 0 identical, step 1 slightly off (above 0.97), step 2 half the signs flipped
    run_b = [run_a[0], _flip(run_a[1], 0.01, rng), _flip(run_a[2], 0.5, rng), _flip(run_a[3], 0.5, rng)]
    _write_run(tmp_path / "a", run_a)
    _write_run(tmp_path / "b", run_b)

    result = GradComparator.compare(tmp_path / "a" / "rank0", tmp_path / "b" / "rank0", tmp_path / "out")

    assert result.steps == [0, 1, 2, 3]
    for step in range(4):
        agree = {n: np.count_nonzero(run_a[step][n] == run_b[step][n]) for n in SHAPES}
        numel = {n: run_a[step][n].size for n in SHAPES}
        for name in SHAPES:
            assert result.similarities[name][step] == pytest.approx(agree[name] / numel[name], abs=1e-15)
        assert result.totals[step] == pytest.approx(sum(agree.values()) / sum(numel.values()), abs=1e-15)
    assert result.totals[0] == 1.0 and result.totals[1] > 0.97 and result.totals[2] < 0.7
    assert result.first_diverging_step == 2
    assert "first diverging step 2" in msprobe_log.text()

    rows = _read_csv(tmp_path / "out" / "similarities.csv")
    assert rows[0] == ["step", "total", *SHAPES]  # model order, from the summary CSV
    assert [float(v) for v in rows[3][1:]] == [result.totals[2], *(result.similarities[n][2] for n in SHAPES)]
    for name in SHAPES:
        assert (tmp_path / "out" / "similarities_picture" / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "out" / "summary_similarities.png").read_bytes()[:8] == PNG_MAGIC


def test_a_steady_decline_is_caught_by_the_drop_rule():
    assert GradComparator.first_diverging_step([0, 1, 2], [1.0, 0.99, 0.95]) == 2
    assert GradComparator.first_diverging_step([0, 1, 2], [0.99, 0.98, 0.975]) is None
    assert GradComparator.first_diverging_step([3, 4], [0.96, 0.96]) == 3


def test_comparing_a_run_with_itself_is_all_ones(tmp_path, msprobe_log):
    rng = np.random.default_rng(1)
    _write_run(tmp_path / "a", [_random_signs(rng) for _ in range(3)])
    result = GradComparator.compare(tmp_path / "a" / "rank0", tmp_path / "a" / "rank0", tmp_path / "out")
    assert result.totals == [1.0, 1.0, 1.0]
    assert all(v == 1.0 for values in result.similarities.values() for v in values)
    assert result.first_diverging_step is None
    assert "no diverging step" in msprobe_log.text()


def test_compare_distributed_writes_one_directory_per_common_rank(tmp_path, msprobe_log):
    rng = np.random.default_rng(2)
    for rank in (0, 1):
        signs = [_random_signs(rng) for _ in range(2)]
        _write_run(tmp_path / "a", signs, rank)
        _write_run(tmp_path / "b", [signs[0], _flip(signs[1], 0.3, rng)], rank)
    _write_run(tmp_path / "a", [_random_signs(rng)], rank=2)  # only in run a

    results = GradComparator.compare_distributed(tmp_path / "a", tmp_path / "b", tmp_path / "out")

    assert sorted(results) == [0, 1]
    assert all(r.first_diverging_step == 1 for r in results.values())
    assert (tmp_path / "out" / "rank1" / "similarities.csv").is_file()
    assert "ranks [2] are in only one input" in msprobe_log.text()
    assert compare_command(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "cli")) == 0
    assert (tmp_path / "cli" / "rank0" / "summary_similarities.png").is_file()


def test_clear_errors_for_missing_inputs_and_mismatched_shapes(tmp_path, msprobe_log):
    rng = np.random.default_rng(3)
    signs = _random_signs(rng)
    _write_run(tmp_path / "a", [signs])
    _write_run(tmp_path / "b", [{**signs, "fc.bias": np.ones(5, dtype=bool)}])

    with pytest.raises(GradCompareError, match=r"parameter 'fc.bias': shape \[4\] .* but \[5\]"):
        GradComparator.compare(tmp_path / "a" / "rank0", tmp_path / "b" / "rank0", tmp_path / "out")
    with pytest.raises(GradCompareError, match="second input .*missing.* is not a directory"):
        GradComparator.compare(tmp_path / "a" / "rank0", tmp_path / "missing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GradCompareError, match="no step directory"):
        GradComparator.compare(tmp_path / "a" / "rank0", tmp_path / "empty", tmp_path / "out")
    with pytest.raises(GradCompareError, match="no rank directory"):
        GradComparator.compare_distributed(tmp_path / "a", tmp_path / "empty", tmp_path / "out")

    msprobe_log.records.clear()
    assert compare_command(str(tmp_path / "nowhere"), str(tmp_path / "a"), str(tmp_path / "out")) == 1
    assert any(r.levelno == logging.ERROR and "nowhere" in r.getMessage() for r in msprobe_log.records)


@pytest.mark.frameworks("pytorch", "mindspore")
def test_grad_comparator_is_importable_from_every_package():
    import msprobe.core
    from msprobe.mindspore import GradComparator as from_mindspore
    from msprobe.pytorch import GradComparator as from_pytorch

    assert msprobe.core.GradComparator is GradComparator
    assert from_pytorch is GradComparator and from_mindspore is GradComparator
