"""Writes the details CSVs of this folder with msprobe 1.1.1's own Comparator (its run_ut needs an
accelerator): run with the python of a venv holding mindstudio-probe==1.1.1 and torch==2.13.0 (CPU),
``python make_111_csv.py OUT``. ``npu/`` has gelu's device output scaled by 1.01 (a wrong kernel),
``gpu/`` is correct. Not imported by the tests."""
import os
import sys

import torch
import torch.nn.functional as F
from msprobe.pytorch.api_accuracy_checker.compare.compare import Comparator
from msprobe.pytorch.api_accuracy_checker.run_ut.run_ut_utils import UtDataInfo

UP = {torch.bfloat16: torch.float32, torch.float16: torch.float32, torch.float32: torch.float64}


def case(name, fn, inputs, grad=None, wrong=1.0):
    outs = []
    for side in ("device", "bench"):
        xs = [x.to(UP.get(x.dtype, x.dtype)) if side == "bench" and x.is_floating_point() else x.clone()
              for x in inputs]
        leaves = [x.requires_grad_(True) for x in xs if x.is_floating_point()] if grad is not None else []
        y = fn(*xs)
        if side == "device" and wrong != 1.0:
            y = y * wrong
        g = None
        if grad is not None:
            g = list(torch.autograd.grad(y, leaves, grad.to(y.dtype)))
            g = [t.detach() for t in g]
        outs.append((y.detach(), g))
    (d, dg), (b, bg) = outs
    return name, UtDataInfo(bg, dg, d, b, None, None, None)


def cases(wrong):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, generator=g)
    w = torch.randn(32, 16, generator=g)
    img = torch.randn(1, 2, 8, 8, generator=g)
    k = torch.randn(3, 2, 3, 3, generator=g)
    return [
        case("Functional.gelu.0", F.gelu, [x.bfloat16()], torch.randn(4, 32, generator=g), wrong),
        case("Torch.matmul.0", torch.matmul, [x.bfloat16(), w.bfloat16()]),
        case("Tensor.__mul__.0", lambda a, b: a * b, [x.bfloat16(), x.flip(0).bfloat16()]),
        case("Torch.argmax.0", lambda a: torch.argmax(a, dim=1), [x.bfloat16()]),
        case("Functional.conv2d.0", F.conv2d, [img, k]),
        case("Torch.softmax.0", lambda a: torch.softmax(a, -1), [x * 3], torch.randn(4, 32, generator=g) * 1e-2),
        case("Functional.layer_norm.0", lambda a: F.layer_norm(a, (32,)), [x]),
    ]


def main(out):
    for label, wrong in (("npu", 1.01), ("gpu", 1.0)):
        result = f"{out}/{label}/accuracy_checking_result_20250101000000.csv"
        details = f"{out}/{label}/accuracy_checking_details_20250101000000.csv"
        os.makedirs(f"{out}/{label}", exist_ok=True)
        comparator = Comparator(result, details, False)
        for name, info in cases(wrong):
            comparator.compare_output(name, info)


main(sys.argv[1])
