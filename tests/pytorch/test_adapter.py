"""TorchTensorAdapter against what msprobe 1.1.1 itself wrote for the same tensor; the adapter contract
every framework's adapter meets (statistics, checksums, files, encodings) is ``tests/contract``."""

from __future__ import annotations

import pytest
import torch

from msprobe.pytorch.adapter import TorchTensorAdapter


def test_float32_matches_what_1_1_1_wrote():
    # reference-outputs/pytorch/pt_statistics_L1_fp32: input of Functional.conv2d.0.forward
    # (extremes exactly; mean and norm to float32 rounding: the summation order differs from torch.mean)
    adapter = TorchTensorAdapter()
    torch.manual_seed(1)
    (got,) = adapter.fetch([adapter.stats(torch.randn(2, 1, 4, 4))])
    assert (got.max, got.min) == (1.6871134042739868, -2.2455577850341797)
    assert got.mean == pytest.approx(-0.34596797823905945, rel=1e-6)
    assert got.norm == pytest.approx(5.287123203277588, rel=1e-6)
