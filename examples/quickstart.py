"""msprobe quickstart (``make demo``): dump a small model in fp32 and under bf16 autocast, then compare.

The same model, data and seed run twice for three training steps, once in plain fp32 and once under
``torch.autocast("cpu", dtype=torch.bfloat16)`` — the situation of a user whose loss drifts after a
change of precision or device. Each run is dumped with PrecisionDebugger (task tensor, level mix);
then the bf16 dump (the "NPU" side) is compared with the fp32 one (the bench side), and the script
prints the first divergence and where the reports are.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger, compare, seed_all


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 8 * 8, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.conv(x)))
        h = nn.functional.gelu(self.fc1(h.flatten(1)))
        return self.fc2(h)


def train(dump_path: Path, bf16: bool, steps: int = 3) -> list[float]:
    seed_all(1234)
    model = TinyNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(steps, 8, 1, 8, 8)
    labels = torch.randint(0, 10, (steps, 8))
    debugger = PrecisionDebugger(dump_path=str(dump_path), task="tensor", level="mix")
    losses = []
    for step in range(steps):
        debugger.start(model)
        precision = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with precision:
            logits = model(data[step])
        loss = nn.functional.cross_entropy(logits.float(), labels[step])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        debugger.stop()
        debugger.step()
        losses.append(loss.item())
    debugger.finish()
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="where the two dumps go (default: demo_output)")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    runs = {"fp32 (bench side)": out / "fp32", "bf16 autocast (NPU side)": out / "bf16"}
    for label, path in runs.items():
        losses = train(path, bf16="bf16" in label)
        print(f"{label:26s} losses {', '.join(f'{v:.6f}' for v in losses)}")
    for label, path in runs.items():
        dumps = sorted(path.glob("step*/rank*/dump.json"))
        print(f"{label:26s} {len(dumps)} step dumps, e.g. {dumps[0]}")
    step0 = {side: runs[label] / "step0" / "rank" for side, label in
             (("npu", "bf16 autocast (NPU side)"), ("bench", "fp32 (bench side)"))}
    result = compare(
        {"npu_path": str(step0["npu"] / "dump.json"), "bench_path": str(step0["bench"] / "dump.json"),
         "stack_path": str(step0["npu"] / "stack.json")},
        out / "compare", stack_mode=True,
    )
    print()
    if result.first_divergence is None:
        print("no divergence found in step 0")
    else:
        print(f"first divergence in step 0: {result.first_divergence.entry}")
    for kind, path in sorted(result.reports.items()):
        print(f"{kind:5s} report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
