"""A small training run packed by ConfigChecker; CC_OUT names the pack, CC_VARIANT changes one thing:
``data`` (batch 1 moves by 1e-3), ``unseeded`` (numpy draws without its seed call), ``weight`` (one weight
moves by 1e-3 before packing); anything else changes nothing. The flags are parsed as argparse would."""

import argparse
import os

import numpy as np
import torch

from msprobe.pytorch import ConfigChecker

ConfigChecker.apply_patches()
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--weight-decay", type=float, default=0.0)
args = parser.parse_args()
variant = os.environ.get("CC_VARIANT", "")
torch.manual_seed(0)
if variant != "unseeded":
    np.random.seed(0)
noise = np.random.rand(4)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
if variant == "weight":
    with torch.no_grad():
        model[0].weight[0, 0] += 1e-3
checker = ConfigChecker(model=model, output_zip_path=os.environ["CC_OUT"], data_steps=3)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
for step in range(4):
    batch = torch.randn(5, 4)
    if variant == "data" and step == 1:
        batch = batch + 1e-3
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"loss {loss.item()!r}")
