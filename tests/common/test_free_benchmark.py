"""The framework-free half of free benchmark: comparison (incl. one-sided non-finite), thresholds,
preheat calibration, the CSV appended across steps and processes and read back, the shared half of a
framework's ops (perturbation walk, re-run under the call's random state) over numpy, and the
collector's per-call state (never on ``Call.state``, never carried into another step)."""

from __future__ import annotations

import csv
import gc
import math
import multiprocessing
import weakref
from contextlib import nullcontext

import numpy as np
import pytest

from msprobe.core.contract import Call
from msprobe.core.services.fileio import append_csv_rows
from msprobe.core.free_benchmark import (
    CSV_COLUMNS,
    FrameworkBenchmarkOps,
    FreeBenchmarkCollector,
    Skip,
    Thresholds,
    dtype_threshold,
    max_relative_error,
    read_rows,
)
from msprobe.core.free_benchmark.compare import SMALL_FRACTION
from msprobe.core.lifecycle.select import Selector


def _reference(a, b):
    """Independent float64 formula: |a-b| / max(|b|, SMALL_FRACTION * max|b|)."""
    a, b = np.float64(a), np.float64(b)
    floor = np.abs(b).max() * SMALL_FRACTION
    return max(abs(x - y) / max(abs(y), floor) for x, y in zip(a.ravel(), b.ravel()))


def test_relative_error_against_float64_reference():
    rng = np.random.default_rng(0)
    perturbed = rng.standard_normal(1000)
    original = (perturbed.astype(np.float16)).astype(np.float64)
    assert math.isclose(max_relative_error(original, perturbed), _reference(original, perturbed), rel_tol=1e-12)
    assert max_relative_error(original, perturbed) <= dtype_threshold("float16")  # fp16 rounding is stable


def test_cancellation_near_zero_is_not_instability():
    assert max_relative_error(np.array([1e-9, 1.0]), np.array([2e-9, 1.0])) < 1e-5


@pytest.mark.parametrize(
    "original,perturbed,expected",
    [([np.inf, 1.0], [7e4, 1.0], math.inf), ([1.0, 2.0], [np.nan, 2.0], math.inf),
     ([np.inf, 1.0], [np.inf, 1.0], 0.0), ([np.nan, 1.0], [np.nan, 1.0], 0.0),
     ([np.inf, 1.0], [-np.inf, 1.0], math.inf), ([np.inf], [np.inf], 0.0)],
)
def test_non_finite_values(original, perturbed, expected):
    assert max_relative_error(np.array(original), np.array(perturbed)) == expected


def test_shape_mismatch_is_a_difference():
    assert max_relative_error(np.ones(3), np.ones(4)) == math.inf


def test_thresholds_grow_with_coarser_dtypes():
    assert dtype_threshold("float64") < dtype_threshold("float32") < dtype_threshold("float16") < dtype_threshold(
        "bfloat16")
    assert dtype_threshold("complex64") == dtype_threshold("float32")


def test_preheat_samples_and_calibrates():
    t = Thresholds(if_preheat=True, preheat_step=2, max_sample=3)
    assert [t.wants("Torch.matmul", 0) for _ in range(5)] == [True] * 3 + [False] * 2
    t.observe("Torch.matmul", "float16", 0.02, step=1)
    t.observe("Torch.matmul", "float16", math.inf, step=1)  # non-finite never calibrates
    assert t.threshold("Torch.matmul", "float16", step=1) == dtype_threshold("float16")
    assert t.threshold("Torch.matmul", "float16", step=2) == pytest.approx(0.04)
    assert t.threshold("Torch.relu", "float16", step=2) == dtype_threshold("float16")
    t.observe("Torch.matmul", "float16", 5.0, step=3)  # after preheat nothing more is learnt
    assert t.threshold("Torch.matmul", "float16", step=3) == pytest.approx(0.04)
    assert t.wants("Torch.matmul", 2)


def test_without_preheat_every_call_is_checked():
    t = Thresholds()
    assert all(t.wants("Torch.exp", 0) for _ in range(100))


@pytest.mark.parametrize("field,value", [("preheat_step", 0), ("max_sample", -1), ("max_sample", True)])
def test_bad_preheat_settings(field, value):
    with pytest.raises(ValueError, match=field):
        Thresholds(if_preheat=True, **{field: value})


def _append(path, rank):
    for step in range(20):
        append_csv_rows(path, CSV_COLUMNS, [[rank, "add_noise", "forward", step, f"Torch.exp.{i}", 0.5,
                                            "torch.float16", "(2, 3)", ""] for i in range(10)])


def test_rows_from_several_ranks_never_interleave(tmp_path):
    path = tmp_path / "free_benchmark.csv"
    processes = [multiprocessing.get_context("fork").Process(target=_append, args=(path, r)) for r in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS and rows.count(list(CSV_COLUMNS)) == 1
    assert len(rows) == 1 + 4 * 20 * 10 and all(len(r) == len(CSV_COLUMNS) for r in rows)


def test_read_rows_gives_what_was_appended(tmp_path):
    path = tmp_path / "free_benchmark.csv"
    assert read_rows(path) == []  # nothing unstable: no file
    append_csv_rows(path, CSV_COLUMNS, [[0, "add_noise", "forward", 3, "Torch.exp.0", "inf", "torch.float16",
                                         "(2, 3)", ""]])
    assert read_rows(path) == [{"rank": "0", "pert_mode": "add_noise", "stage": "forward", "step": "3",
                                "api_name": "Torch.exp.0", "max_rel": "inf", "dtype": "torch.float16",
                                "shape": "(2, 3)", "output_index": ""}]
    (tmp_path / "other.csv").write_text("rank,pert_type\n0,add_noise\n")
    with pytest.raises(ValueError, match="header"):
        read_rows(tmp_path / "other.csv")


class Saved:
    """Inputs kept for the backward stage (an object a test can hold a weak reference to)."""

    def __init__(self, args: tuple) -> None:
        self.args = args


class NumpyOps(FrameworkBenchmarkOps):
    """The framework half over numpy: the random state is one generator's, ``no_change`` keeps the
    inputs, ``add_noise`` moves float64 elements by one ulp, ``skip`` refuses the call."""

    modes = ("no_change", "add_noise", "skip")
    tensor_type = np.ndarray

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.saved: list[weakref.ref] = []
        self.gradients_asked = 0

    def perturb_tensor(self, mode, t):
        if mode == "skip":
            return Skip("not here")
        if t.dtype.kind != "f":
            return None
        return t if mode == "no_change" else t * (1 + 2.0**-52)

    def random_state(self):
        return self.rng.bit_generator.state

    def set_random_state(self, state):
        self.rng.bit_generator.state = state

    def no_grad(self):
        return nullcontext()

    def is_float(self, t):
        return t.dtype.kind == "f"

    def as_float64(self, t):
        return t.astype(np.float64)

    def dtype_key(self, t):
        return str(t.dtype)

    def fixed(self, output, perturbed):
        return perturbed

    def save_for_backward(self, args, kwargs):
        saved = Saved(args)
        self.saved.append(weakref.ref(saved))
        return saved

    def input_gradients(self, call, saved, mode, state, grad_input):
        self.gradients_asked += 1
        return [None for _ in saved.args]


def test_framework_ops_perturb_only_what_the_mode_changes():
    ops = NumpyOps()
    x, n = np.ones(3), np.arange(3)
    (args, kwargs) = ops.perturb("add_noise", (x, [n]), {"k": x})
    assert args[1][0] is n and args[0] is not x and np.all(args[0] > x) and np.all(kwargs["k"] > x)
    assert np.all(x == 1.0)  # the originals are untouched
    assert ops.perturb("add_noise", (n,), {}) == Skip("no input this pert_mode can change")
    assert ops.perturb("skip", (x,), {}) == Skip("not here")
    with pytest.raises(ValueError, match="give one of no_change, add_noise, skip"):
        ops.perturb("to_cpu", (x,), {})
    assert [i for i, _ in ops.float_outputs((n, x, [x]))] == [1, 2]
    assert ops.describe(np.zeros((2, 3), np.float32)) == ("float32", (2, 3))


def _dropout_call(ops: NumpyOps, x: np.ndarray, name: str = "Functional.dropout.0.forward") -> Call:
    return Call(name=name, args=(x,), kwargs={}, rerun=lambda t: t * (ops.rng.random(t.shape) > 0.5))


def _collector(tmp_path, ops, **options) -> FreeBenchmarkCollector:
    collector = FreeBenchmarkCollector(dump_path=str(tmp_path), selector=Selector(), ops=ops, **options)
    collector.begin_step(0, None)
    return collector


def _intercepted(collector, call):
    """What an interceptor does: the sink before and after the real call."""
    wants_backward = collector.forward_start(call)
    output = call.rerun(*call.args, **call.kwargs)
    replaced = collector.forward_end(call, output)
    return wants_backward, output if replaced is None else replaced


def test_rerun_draws_what_the_call_drew_and_leaves_the_users_stream_alone(tmp_path):
    """A re-run of a random API under no_change gives the same output (the same mask), and the user's
    next draw is the one a run without msprobe makes."""
    plain = NumpyOps()
    x = np.arange(1.0, 65.0)
    expected = _dropout_call(plain, x).rerun(x)
    ops = NumpyOps()
    collector = _collector(tmp_path, ops, pert_mode="no_change")
    call = _dropout_call(ops, x)
    _, output = _intercepted(collector, call)
    collector.end_step()
    assert np.array_equal(output, expected) and read_rows(collector.csv_path) == []
    assert ops.rng.random() == plain.rng.random()
    assert call.state == {}  # the collector keeps its per-call state itself


def test_forward_check_writes_a_row_for_an_unstable_output(tmp_path):
    ops = NumpyOps()
    collector = _collector(tmp_path, ops, pert_mode="add_noise")
    x = np.array([1.0, 2.0])
    call = Call(name="Torch.sub.0.forward", args=(x,), kwargs={}, rerun=lambda t: t - np.array([1.0, 2.0]))
    _intercepted(collector, call)
    collector.end_step()
    [row] = read_rows(collector.csv_path)
    assert (row["api_name"], row["stage"], row["dtype"], row["shape"]) == ("Torch.sub.0", "forward", "float64", "(2,)")


def test_backward_state_is_released_with_its_call(tmp_path):
    """A call whose backward never comes (outside the gradient graph) takes its saved inputs with it."""
    ops = NumpyOps()
    collector = _collector(tmp_path, ops, fuzz_stage="backward")
    call = _dropout_call(ops, np.ones(4))
    assert _intercepted(collector, call)[0] is True
    [saved] = ops.saved
    assert saved() is not None
    del call
    gc.collect()
    assert saved() is None


def test_backward_state_never_reaches_another_step(tmp_path):
    ops = NumpyOps()
    collector = _collector(tmp_path, ops, fuzz_stage="backward")
    late = _dropout_call(ops, np.ones(4))
    _intercepted(collector, late)
    collector.end_step()
    assert ops.saved[0]() is None  # dropped at the step's end although the call lives on
    collector.begin_step(1, None)
    collector.backward(late, (np.ones(4),), (np.ones(4),))  # step 0's call reports its backward in step 1
    assert ops.gradients_asked == 0
    on_time = _dropout_call(ops, np.ones(4))
    _intercepted(collector, on_time)
    collector.backward(on_time, (np.ones(4),), (np.ones(4),))
    collector.backward(on_time, (np.ones(4),), (np.ones(4),))  # judged once
    assert ops.gradients_asked == 1 and on_time.state == {}
