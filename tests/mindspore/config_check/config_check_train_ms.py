"""A small MindSpore PyNative run packed by ConfigChecker; CC_OUT names the pack, CC_VARIANT=weight moves one
weight by 1e-3 before packing, CC_VARIANT=seed seeds with 2 instead of 1."""

import os

import mindspore
import numpy as np

from msprobe.mindspore import ConfigChecker

ConfigChecker.apply_patches()
variant = os.environ.get("CC_VARIANT", "")
mindspore.set_seed(2 if variant == "seed" else 1)
net = mindspore.nn.SequentialCell(mindspore.nn.Dense(4, 8), mindspore.nn.ReLU(), mindspore.nn.Dense(8, 1))
if variant == "weight":
    weight = net[0].weight
    weight.set_data(weight + mindspore.Tensor(np.eye(8, 4, dtype=np.float32) * 1e-3))
ConfigChecker(model=net, output_zip_path=os.environ["CC_OUT"], data_steps=2)
for _step in range(3):
    out = net(mindspore.ops.standard_normal((5, 4)))
print(out.sum())
