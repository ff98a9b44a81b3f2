"""Mean and Norm of a finite float32 tensor are finite and agree with float64 numpy to 1e-6 at both ends
of float32's range — subnormal squares (AdamW's ``exp_avg_sq``, ~1e-22) and sums past 3e38 — on every
path: numpy on the host (small and large tensors), torch's large-tensor path, and the device paths
(batched copies and single reductions), which run on the CPU too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from msprobe.pytorch.adapter import TorchTensorAdapter, _device_stats, _host_stats

SCALES = [1e-22, 1e-12, 1.0, 1e20, 3.3e38]
SIZES = [96, 20000]  # batched/numpy, and the single-reduction paths


@pytest.mark.parametrize("path", ["host", "device"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scale", SCALES)
def test_mean_and_norm_are_exact_at_both_ends_of_float32(path, size, scale):
    rng = np.random.default_rng(size)
    values = (rng.random(size) * scale).astype(np.float32)
    values[::7] *= -1
    exact = values.astype(np.float64)
    compute = _host_stats if path == "host" else _device_stats
    stats = TorchTensorAdapter().fetch([compute(torch.from_numpy(values.copy()))])[0]
    assert np.isfinite([stats.mean, stats.norm]).all()
    assert stats.norm == pytest.approx(np.linalg.norm(exact), rel=1e-6)
    rms = np.linalg.norm(exact) / np.sqrt(size)  # a mean near zero is judged against the values' scale
    assert abs(stats.mean - exact.mean()) <= 1e-6 * rms
    assert (stats.max, stats.min) == (exact.max(), exact.min())


def test_mindspore_paths_agree_too():
    ms = pytest.importorskip("mindspore")
    from msprobe.mindspore.adapter import MindSporeTensorAdapter, device_stats

    adapter = MindSporeTensorAdapter()
    for scale in SCALES:
        for size in SIZES:
            values = (np.random.default_rng(size).random(size) * scale).astype(np.float32)
            exact = values.astype(np.float64)
            for stats in adapter.fetch([adapter.stats(ms.Tensor(values)), device_stats(ms.Tensor(values))]):
                assert stats.norm == pytest.approx(np.linalg.norm(exact), rel=1e-6), (scale, size)
                assert stats.mean == pytest.approx(exact.mean(), rel=1e-6), (scale, size)
