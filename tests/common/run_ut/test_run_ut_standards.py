"""API pre-check standards (msprobe.core.run_ut): each rule against hand-computed values."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from msprobe.core.run_ut import api_status, judge_output, load_standards, normalise_api, normalise_dtype
from msprobe.core.run_ut import metrics as m
from msprobe.core.run_ut.standards import (
    ABSOLUTE,
    BENCHMARK,
    BINARY,
    ERROR,
    FLOAT_DTYPES,
    PASS,
    SKIP,
    STANDARDS,
    THOUSANDTH,
    ULP,
    WARNING,
    OutputVerdict,
    parse_standards,
)

F16_ULP_AT_1 = 2.0**-10  # fp16 spacing in [1, 2)
F32_ULP_AT_1 = 2.0**-23


def f64(*values):
    return np.array(values, dtype=np.float64)


# --- the data file ------------------------------------------------------------------------------


def test_data_file_loads_and_every_api_maps_to_a_known_standard():
    table = load_standards()
    raw = json.loads(resources.files("msprobe.core.run_ut").joinpath("standards.json").read_text())
    assert raw["default_standard"] in STANDARDS
    listed = [name for names in raw["apis"].values() for name in names]
    assert len(listed) == len(set(listed)), "an API is listed twice"
    for standard, names in raw["apis"].items():
        assert standard in STANDARDS
        for name in names:
            assert table.standard_for(name, "float16") == standard
    for standard in (ABSOLUTE, ULP, BENCHMARK):
        for dtype in FLOAT_DTYPES:
            assert dtype in raw["thresholds"][standard]
            assert dtype in raw["thresholds"]["formats"]
            assert dtype in raw["thresholds"]["stage1"]["rtol"]
    for dtype in FLOAT_DTYPES:
        bounds = raw["thresholds"][BENCHMARK][dtype]["absolute"]
        assert all(warn <= err for warn, err in bounds.values())
    assert {"rtol", "min_ratio"} <= set(table.numbers(THOUSANDTH, "float16"))


def test_data_file_rejects_unknown_standard_and_double_listing():
    base = {"default_standard": "benchmark", "thresholds": {}}
    with pytest.raises(ValueError, match="unknown"):
        parse_standards({**base, "apis": {"exactness": ["add"]}})
    with pytest.raises(ValueError, match="both"):
        parse_standards({**base, "apis": {"ulp": ["mm"], "thousandth": ["mm_"]}})


@pytest.mark.parametrize("api, dtype, standard", [
    ("Functional.conv2d.0.forward", "torch.float16", THOUSANDTH),
    ("Tensor.add_.3.forward", "torch.float16", ABSOLUTE),
    ("Tensor.__iadd__.0.forward", "torch.bfloat16", ABSOLUTE),
    ("Torch.matmul.1.forward", "torch.float32", ULP),
    ("Torch.matmul.1.backward.output.0", "torch.float32", BENCHMARK),  # every input gradient: benchmark
    ("Tensor.expand.0.backward.output.0", "torch.float32", BENCHMARK),
    ("Tensor.__mul__.0.backward.output.1", "torch.bfloat16", BENCHMARK),
    ("Tensor.expand.0.backward.output.0", "torch.int64", BINARY),
    ("Mint.max", "Float16", BINARY),
    ("reshape", "BFloat16", BINARY),
    ("Functional.gelu.0.forward", "torch.float16", BENCHMARK),
    ("Functional.gelu.0.forward", "torch.int64", BINARY),
    ("softmax", "Bool", BINARY),
])
def test_standard_assignment(api, dtype, standard):
    assert load_standards().standard_for(api, dtype) == standard


@pytest.mark.parametrize("given, expected", [
    ("torch.float16", "float16"), ("torch.half", "float16"), ("Float16", "float16"),
    ("torch.bfloat16", "bfloat16"), ("BFloat16", "bfloat16"), ("mindspore.bfloat16", "bfloat16"),
    ("torch.float32", "float32"), ("torch.float", "float32"), ("Float32", "float32"),
    ("torch.float64", "float64"), ("Float64", "float64"), (np.dtype("float16"), "float16"),
    ("torch.int64", "int"), ("Int32", "int"), ("UInt8", "int"), ("torch.bool", "bool"), ("Bool", "bool"),
    ("torch.complex64", "complex64"), ("torch.float8_e4m3fn", "other"),
])
def test_normalise_dtype(given, expected):
    assert normalise_dtype(given) == expected


def test_normalise_api():
    assert normalise_api("Functional.conv2d.0.forward") == "conv2d"
    assert normalise_api("Tensor.mul_.2.backward") == "mul"
    assert normalise_api("Tensor.__imul__.0.forward") == "__imul__"
    assert normalise_api("bmm") == "bmm"


# --- ULP ------------------------------------------------------------------------------------------


def test_ulp_of_known_values():
    # fp16: 1.0 has spacing 2^-10, 0.75 has 2^-11, 0 and subnormals 2^-24; fp32: 1.0 has 2^-23.
    assert m.ulp_of(f64(1.0, 1.999, 0.75, 0.0, 2.0**-20), 10, -14).tolist() == [
        2.0**-10, 2.0**-10, 2.0**-11, 2.0**-24, 2.0**-24]
    assert m.ulp_of(f64(1.0, -3.0), 23, -126).tolist() == [2.0**-23, 2.0**-22]


def test_ulp_error_of_an_fp16_rounding():
    bench = np.float32(1.0004)  # the fp32 bench; fp16 rounds it to 1.0
    device = np.float64(np.float16(bench))
    assert device == 1.0
    errs = m.ulp_errors(f64(device), f64(bench), 10, -14)
    assert errs[0] == pytest.approx((float(bench) - 1.0) / 2.0**-10)  # ≈ 0.4096 ULP
    assert errs[0] == pytest.approx(0.4096, abs=1e-4)


def test_ulp_fp16_pass_and_error():
    bench = f64(1.0, 2.0, 0.5)
    one_ulp = judge_output("mm", "torch.float16", bench + f64(F16_ULP_AT_1, 0, 0), bench)
    assert one_ulp.standard == ULP and one_ulp.status == PASS
    assert one_ulp.metrics["max_ulp_err"] == 1.0
    assert one_ulp.metrics["mean_ulp_err"] == pytest.approx(1 / 3)
    two_ulp = judge_output("mm", "torch.float16", bench + f64(2 * F16_ULP_AT_1, 0, 0), bench)
    assert two_ulp.status == ERROR
    assert two_ulp.metrics["ulp_err_over_ratio"] == pytest.approx(1 / 3)


def test_ulp_bf16_uses_its_own_spacing():
    bench = f64(1.0, 1.0)
    device = bench + f64(2.0**-7, 0)  # one bf16 ULP at 1.0
    verdict = judge_output("bmm", "torch.bfloat16", device, bench)
    assert verdict.metrics["max_ulp_err"] == 1.0 and verdict.status == PASS


@pytest.mark.parametrize("ulps, status", [
    ([40] * 10 + [0] * 90, PASS),        # 10 % over 32 ULP, but mean 4 < 64
    ([2000] * 4 + [0] * 96, PASS),       # mean 80 >= 64, but only 4 % over 32 ULP
    ([1000] * 10 + [0] * 90, ERROR),     # mean 100 and 10 % over 32 ULP
    ([100] * 100, ERROR),                # mean 100 and 100 % over
    ([63] * 100, PASS),                  # mean 63 < 64
])
def test_ulp_fp32_rule(ulps, status):
    bench = np.ones(100)
    device = bench + np.array(ulps, dtype=np.float64) * F32_ULP_AT_1
    verdict = judge_output("Torch.matmul.0.forward", "torch.float32", device, bench)
    assert verdict.status == status
    assert verdict.metrics["mean_ulp_err"] == pytest.approx(np.mean(ulps))
    assert verdict.metrics["ulp_err_over_ratio"] == pytest.approx(np.mean(np.array(ulps) > 32))


# --- absolute threshold, thousandth, binary consistency --------------------------------------------


def test_absolute_threshold_fp16():
    bench = f64(1.0, 0.0005)  # the second is in the small-value region (|b| < 1e-3)
    ok = judge_output("mul", "torch.float16", f64(1.0009, 0.0014), bench)
    assert ok.standard == ABSOLUTE and ok.status == PASS
    assert ok.metrics["rel_err_ratio"] == 0 and ok.metrics["abs_err_ratio"] == 0
    rel_bad = judge_output("mul", "torch.float16", f64(1.0011, 0.0005), bench)  # rel err 1.1e-3 > 1e-3
    assert rel_bad.status == ERROR and rel_bad.metrics["rel_err_ratio"] == 0.5
    abs_bad = judge_output("mul", "torch.float16", f64(1.0, 0.0016), bench)  # abs err 1.1e-3 > 1e-3
    assert abs_bad.status == ERROR and abs_bad.metrics["abs_err_ratio"] == 0.5


def test_absolute_threshold_fp32_is_tighter():
    bench = f64(1.0, 2.0)
    assert judge_output("div", "torch.float32", f64(1.0 + 5e-7, 2.0), bench).status == PASS
    assert judge_output("div", "torch.float32", f64(1.0 + 2e-6, 2.0), bench).status == ERROR


def test_absolute_threshold_noise_of_the_output_scale():
    # fp32 p + alpha*g rounds twice; where the result cancels (1e-4 out of operands of 0.5) the first
    # rounding's error (~u·0.5) is large relative to the result but under 16u·max|b| = 2^-20·0.5
    bench = f64(0.5, 1e-4)
    assert judge_output("add", "torch.float32", f64(0.5, 1e-4 + 3e-8), bench).status == PASS
    bad = judge_output("add", "torch.float32", f64(0.5, 1e-4 + 1e-6), bench)  # 1e-6 > 4.77e-7
    assert bad.status == ERROR and bad.metrics["rel_err_ratio"] == 0.5


def test_thousandth_bfloat16_uses_its_own_rounding():
    bench = np.ones(1000)
    device = bench * 1.003  # 0.3 %: under bfloat16's u = 0.39 %, over float16's 0.1 %
    assert judge_output("conv2d", "torch.bfloat16", device, bench).status == PASS
    assert judge_output("conv2d", "torch.float16", device, bench).status == ERROR
    assert judge_output("conv2d", "torch.bfloat16", bench * 1.005, bench).status == ERROR


def test_thousandth_conv():
    bench = np.ones(1000)
    one = bench.copy()
    one[0] = 1.002  # 999 of 1000 within 0.1 % → 0.999 passes
    verdict = judge_output("Functional.conv2d.0.forward", "torch.float16", one, bench)
    assert verdict.standard == THOUSANDTH and verdict.status == PASS
    assert verdict.metrics["rel_err_thousandth"] == pytest.approx(0.999)
    two = one.copy()
    two[1] = 0.997
    verdict = judge_output("conv2d", "torch.float16", two, bench)
    assert verdict.status == ERROR and verdict.metrics["rel_err_thousandth"] == pytest.approx(0.998)


def test_binary_consistency():
    ints = np.array([1, 2, 3, 4])
    assert judge_output("add", "torch.int64", ints, ints.copy()).status == PASS
    bad = judge_output("add", "torch.int64", ints, np.array([1, 2, 3, 5]))
    assert bad.standard == BINARY and bad.status == ERROR and bad.metrics["error_ratio"] == 0.25
    flags = np.array([True, False])
    assert judge_output("eq", "torch.bool", flags, flags.copy()).status == PASS
    assert judge_output("eq", "torch.bool", flags, ~flags).metrics["error_ratio"] == 1.0
    # float outputs of an exact API: one ULP off is an error
    floats = f64(1.0, np.nan, 3.0)
    assert judge_output("Tensor.reshape.0.forward", "torch.float16", floats, floats.copy()).status == PASS
    off = judge_output("reshape", "torch.float16", f64(1.0, np.nan, 3.0 + 2.0**-9), floats)
    assert off.status == ERROR and off.metrics["error_ratio"] == pytest.approx(1 / 3)


def test_integer_array_is_binary_whatever_the_dtype_name():
    verdict = judge_output("gelu", "something", np.array([1, 2]), np.array([1, 2]))
    assert verdict.standard == BINARY and verdict.status == PASS
    # e.g. the int64 indices output of an API run in float16
    verdict = judge_output("unique", "torch.float16", np.array([0, 2]), np.array([0, 1]))
    assert verdict.standard == BINARY and verdict.status == ERROR


# --- benchmark method ------------------------------------------------------------------------------


def test_benchmark_metrics_by_hand():
    # S = max|b| = 0.004: the small-value bound stays float16's 1e-3 (> S/32 = 1.25e-4) and the
    # tolerance its 1e-5 (> 4u·S = 2^-9·0.004 = 7.8e-6)
    bench = f64(1e-4, 0.002, 0.001, -0.004)
    device = f64(1e-4 + 2e-5, 0.002002, 0.001, -0.004004)
    found = judge_output("gelu", "torch.float16", device, bench).metrics
    assert (found["small_value"], found["small_value_atol"]) == (1e-3, 1e-5)
    assert found["small_value_err_ratio"] == 1.0           # one small value, off by 2e-5 > 1e-5
    assert found["rmse"] == pytest.approx(np.sqrt((4e-10 + 4e-12 + 0 + 16e-12) / 4))
    assert found["max_rel_err"] == pytest.approx(0.001)     # 0.002002 vs 0.002 and -0.004004 vs -0.004
    assert found["mean_rel_err"] == pytest.approx(0.002 / 3)
    assert found["eb"] == pytest.approx(0.0)                # +0.001 and -0.001 (signed by bench) cancel
    assert found["rmse_rel"] == pytest.approx(found["rmse"] / np.sqrt((1e-8 + 4e-6 + 1e-6 + 16e-6) / 4))


def test_benchmark_small_value_region_scales_with_the_output():
    # S = 4: the region is |b| < 4/32 = 0.125 and its tolerance 4u·S = 4·2^-11·4 = 2^-7 (float16)
    bench = f64(1e-4, 0.1, 1.0, -4.0)
    found = judge_output("gelu", "torch.float16", bench + f64(2e-3, 0.0, 0.0, 0.0), bench).metrics
    assert found["small_value"] == 0.125 and found["small_value_atol"] == 2.0**-7
    assert found["small_value_err_ratio"] == 0.0            # 2e-3 < 2^-7 = 7.8e-3: cancellation-sized
    assert found["max_rel_err"] == 0.0                      # 1e-4 and 0.1 are not in the relative region
    found = judge_output("gelu", "torch.float16", bench + f64(0.0, 0.01, 0.0, 0.0), bench).metrics
    assert found["small_value_err_ratio"] == pytest.approx(0.5)  # 0.01 > 2^-7: 1 of the 2 small values


def test_softmax_backward_cancellation_is_not_an_error():
    # softmax backward: g_x = y * (g - sum(g * y)); in float32 the subtraction cancels, leaving elements
    # much smaller than the output's largest whose own relative error is large. Element 1 here is
    # 1e-6·S with an absolute error of 2u·S: relative error 0.12, but an error of a correct kernel.
    u = 2.0**-24
    bench = f64(1.0, 1e-6, -0.5, 0.25)
    device = bench + f64(0.0, 2 * u, u / 2, 0.0)
    verdict = judge_output("Torch.softmax.0.backward.output.0", "torch.float32", device, bench)
    assert verdict.standard == BENCHMARK and verdict.status == PASS
    # the same error on a large element is still found
    device = bench * (1 + 1e-4)
    assert judge_output("Torch.softmax.0.backward.output.0", "torch.float32", device, bench).status == ERROR


def _cancelling_bias_gradient(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A linear layer's output gradient whose columns sum to zero in exact arithmetic (softmax's keys), held
    in float32 as training holds it → (the gradient, its bias gradient summed in float32 as a device does,
    the float64 sum of the same float32 values as the bench does)."""
    exact = rng.standard_normal((64, 16))
    grad = (exact - exact.mean(axis=0)).astype(np.float32)
    return grad, grad.sum(axis=0, dtype=np.float32).astype(np.float64), grad.astype(np.float64).sum(axis=0)


def test_a_gradient_whose_exact_value_is_zero_is_judged_against_its_inputs_rounding():
    grad, device, bench = _cancelling_bias_gradient(np.random.default_rng(0))
    scale = float(np.linalg.norm(grad.astype(np.float64)))
    name = "Functional.linear.1.backward.output.2"
    assert judge_output(name, "torch.float32", device, bench).status == ERROR  # cosine of rounding noise
    verdict = judge_output(name, "torch.float32", device, bench, gradient_scale=scale)
    assert verdict.status == PASS, verdict.message
    assert verdict.metrics["cancelled_distance"] == pytest.approx(np.linalg.norm(device - bench))
    assert verdict.metrics["cancelled_distance"] <= verdict.metrics["cancelled_floor"] == 16 * 2.0**-24 * scale
    wrong = device + 1e-4 * scale / np.sqrt(device.size)  # a kernel that does not cancel: 1e-4 of the scale
    verdict = judge_output(name, "torch.float32", wrong, bench, gradient_scale=scale)
    assert verdict.status == ERROR and "exact gradient is zero" in verdict.message


def test_a_small_gradient_that_is_not_zero_keeps_its_standard():
    grad, device, bench = _cancelling_bias_gradient(np.random.default_rng(1))
    scale = float(np.linalg.norm(grad.astype(np.float64)))
    bench = bench + 1e-3 * scale  # far above the rounding of its inputs: judged by the usual standard
    verdict = judge_output("Functional.linear.1.backward.output.2", "torch.float32", bench * (1 + 1e-2), bench,
                           gradient_scale=scale)
    assert verdict.status == ERROR and "cancelled_floor" not in verdict.metrics


@pytest.mark.parametrize("units, judged_as_zero", [(10.2, True), (15.9, True), (16.1, False)])
def test_the_bench_counts_as_zero_where_zero_itself_would_pass(units, judged_as_zero):
    """The zoo's BERT key biases measured up to 10.2 units of the bench (docs/run_ut.md): within the slack of
    16 the rule applies, above it the usual standard judges."""
    grad, _, bench = _cancelling_bias_gradient(np.random.default_rng(2))
    scale = float(np.linalg.norm(grad.astype(np.float64)))
    bench = bench / np.linalg.norm(bench) * units * 2.0**-24 * scale
    verdict = judge_output("Functional.linear.1.backward.output.2", "torch.float32", bench, bench,
                           gradient_scale=scale)
    assert ("cancelled_floor" in verdict.metrics) == judged_as_zero and verdict.status == PASS


@pytest.mark.parametrize("scale, status", [(1.0004, PASS), (1.0015, WARNING), (1.003, ERROR)])
def test_benchmark_absolute_grades(scale, status):
    bench = f64(1.0, 2.0, 3.0, 4.0)
    verdict = judge_output("gelu", "torch.float16", bench * scale, bench)
    assert verdict.standard == BENCHMARK and verdict.status == status
    assert verdict.metrics["mean_rel_err"] == pytest.approx(scale - 1)
    assert verdict.metrics["eb"] == pytest.approx(scale - 1)


def test_benchmark_small_value_error():
    bench = f64(1e-4, 0.002)  # S/32 < 1e-3 and 4u·S < 1e-5: the dtype's own small-value numbers apply
    verdict = judge_output("gelu", "torch.float16", f64(1e-4 + 2e-5, 0.002), bench)
    assert verdict.status == ERROR and "small_value_err_ratio error" in verdict.message


@pytest.mark.parametrize("peer_scale, status", [(1.003, PASS), (1.002, WARNING), (1.001, ERROR)])
def test_benchmark_against_a_peer(peer_scale, status):
    bench = f64(1.0, 2.0, 3.0, 4.0)
    verdict = judge_output("gelu", "torch.float16", bench * 1.003, bench, peer=bench * peer_scale)
    assert verdict.status == status
    assert verdict.metrics["mean_rel_err_ratio"] == pytest.approx(0.003 / (peer_scale - 1))
    assert verdict.metrics["small_value_err_ratio_ratio"] == 1.0  # 0 and 0


def test_benchmark_peer_ignored_under_the_absolute_floor():
    bench = f64(1.0, 2.0)
    verdict = judge_output("gelu", "torch.float16", bench * 1.0002, bench, peer=bench * 1.00001)
    assert verdict.metrics["mean_rel_err_ratio"] == pytest.approx(20)
    assert verdict.status == PASS


# --- stage 1 ------------------------------------------------------------------------------------------


def test_stage1_cosine_and_max_abs():
    bench = f64(1.0, 2.0, 3.0)
    flipped = judge_output("gelu", "torch.float16", -bench, bench)
    assert flipped.stage1 == ERROR and flipped.metrics["stage1_cosine"] == pytest.approx(-1.0)
    close = judge_output("gelu", "torch.float16", bench + 0.0009, bench)
    assert close.stage1 == PASS and close.metrics["stage1_max_abs_err"] == pytest.approx(0.0009)


def test_stage1_ratio_rule():
    bench = np.full(1000, 10.0)
    device = bench.copy()
    device[0] = 10.02  # rel err 2e-3: 999/1000 under 1e-3 → pass (>= 0.999)
    assert judge_output("gelu", "torch.float16", device, bench).stage1 == PASS
    device[1] = 10.02  # 998/1000 under 1e-3, all under 5e-3 → Warning
    assert judge_output("gelu", "torch.float16", device, bench).stage1 == WARNING
    device[:10] = 10.1  # rel 1e-2 on 10 elements: 990/1000 under 5e-3 < 0.995 → error
    verdict = judge_output("gelu", "torch.float16", device, bench)
    assert verdict.stage1 == ERROR and verdict.metrics["stage1_rel_err_ratio_5x"] == pytest.approx(0.99)


# --- shapes, inf/nan, empty -------------------------------------------------------------------------


def test_shape_mismatch_is_error():
    verdict = judge_output("mm", "torch.float16", np.ones((2, 3)), np.ones((3, 2)))
    assert verdict.status == ERROR and "shape" in verdict.message


def test_empty_output_passes():
    verdict = judge_output("mm", "torch.float16", np.ones((0, 3)), np.ones((0, 3)))
    assert verdict.status == PASS and verdict.message == "empty output"


def test_none_and_non_numeric_are_skip():
    assert judge_output("mm", "torch.float16", None, np.ones(2)).status == SKIP
    assert judge_output("mm", "torch.float16", np.array(["a"]), np.array(["a"])).status == SKIP
    assert judge_output("gelu", "torch.float8_e4m3fn", np.ones(2), np.ones(2)).status == SKIP


@pytest.mark.parametrize("api", ["mm", "mul", "conv2d", "gelu"])
def test_nonfinite_same_positions_and_signs_pass(api):
    bench = f64(np.nan, np.inf, -np.inf, 1.0, 2.0)
    verdict = judge_output(api, "torch.float16", bench.copy(), bench)
    assert verdict.status == PASS


@pytest.mark.parametrize("device", [
    f64(np.nan, 2.0), f64(1.0, np.inf), f64(-np.inf, 2.0),
])
@pytest.mark.parametrize("api", ["mm", "mul", "conv2d", "gelu"])
def test_nonfinite_mismatch_is_error(api, device):
    bench = f64(np.inf, 2.0)
    verdict = judge_output(api, "torch.float16", device, bench)
    assert verdict.status == ERROR and verdict.metrics["nonfinite_mismatch"] >= 1
    assert "inf/nan" in verdict.message


def test_all_nonfinite_matching_passes():
    bench = f64(np.nan, np.inf)
    assert judge_output("gelu", "torch.float32", bench.copy(), bench).status == PASS


def test_complex_output_judged_on_real_and_imaginary_parts():
    bench = np.array([1 + 1j, 2 - 1j], dtype=np.complex128)
    ok = judge_output("matmul", "torch.complex64", bench + F32_ULP_AT_1, bench)
    assert ok.standard == ULP and ok.status == PASS and ok.metrics["max_ulp_err"] == 1.0


# --- aggregation --------------------------------------------------------------------------------------


def v(status):
    return OutputVerdict(status, BENCHMARK)


@pytest.mark.parametrize("statuses, expected", [
    ([PASS, PASS], PASS),
    ([PASS, WARNING], WARNING),
    ([WARNING, ERROR, PASS], ERROR),
    ([SKIP, PASS], PASS),
    ([SKIP, WARNING], WARNING),
    ([SKIP, SKIP], SKIP),
    ([], SKIP),
])
def test_api_status_is_the_worst_output(statuses, expected):
    assert api_status([v(s) for s in statuses]) == expected
    assert api_status(statuses) == expected


# --- every standard's numbers of one output (the details CSV columns) --------------------------------


def test_all_metrics_by_hand():
    from msprobe.core.run_ut.standards import all_metrics

    bench = f64(1.0, 2.0, 1e-4, np.nan)
    device = f64(1.0 + F16_ULP_AT_1, 2.0, 1e-4 + 2e-3, 1.0)
    found = all_metrics("gelu", "torch.float16", device, bench)
    assert found["error_ratio"] == 0.75                     # every element but 2.0 differs
    assert found["inf_nan_err_ratio"] == 0.25               # nan against 1.0
    # the three finite pairs, float16 absolute threshold: rtol 1e-3 (2^-10 is under), atol 1e-3 (2e-3 is over)
    assert (found["rel_err_ratio"], found["abs_err_ratio"]) == (0.0, pytest.approx(1 / 3))
    # ULP of 1e-4 = 1.6384·2^-14 in float16: 2^(-14-10); 2e-3 / 2^-24 ULP
    assert found["mean_ulp_err"] == pytest.approx((1 + 0 + 2e-3 * 2.0**24) / 3)
    assert found["max_ulp_err"] == pytest.approx(2e-3 * 2.0**24) and found["ulp_err_over_ratio"] == pytest.approx(1 / 3)
    # relative errors 2^-10, 0, 20
    assert (found["hundredth"], found["thousandth"], found["ten_thousandth"]) == pytest.approx((2 / 3, 2 / 3, 1 / 3))
    # benchmark method, S = 2: 1e-4 is the only small value, its tolerance 2^-9·2 > 2e-3
    assert found["small_value_err_ratio"] == 0.0
    assert found["rmse"] == pytest.approx(np.sqrt((F16_ULP_AT_1**2 + 0 + 4e-6) / 3))
    assert found["max_rel_err"] == pytest.approx(F16_ULP_AT_1)
    assert found["mean_rel_err"] == pytest.approx(F16_ULP_AT_1 / 2) and found["eb"] == pytest.approx(F16_ULP_AT_1 / 2)
    assert all_metrics("argmax", "torch.int64", np.array([1, 2]), np.array([1, 3])) == {"error_ratio": 0.5}
