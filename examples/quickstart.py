"""msprobe quickstart (``make demo``): dump a small model in fp32 and under bf16 autocast, then compare.

The same model, data and seed run for three training steps in plain fp32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` — the situation of a user whose loss drifts after a
change of precision or device. Each run is dumped with PrecisionDebugger (task tensor, level mix),
and each bf16 dump (the "NPU" side) is compared with the fp32 one (the bench side):

- the plain bf16 run differs from fp32 only by bf16 rounding, so no first divergence is named;
- a second bf16 run has a fault — ``fc1``'s weight 5% off, as a broken kernel would make it — and the
  comparison names the first entry of ``fc1`` as the first divergence.
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


def train(dump_path: Path, bf16: bool, fault: bool = False, steps: int = 3) -> list[float]:
    seed_all(1234)
    model = TinyNet()
    if fault:
        with torch.no_grad():
            model.fc1.weight.mul_(1.05)
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


def compare_step0(npu: Path, bench: Path, out: Path):
    npu, bench = npu / "step0" / "rank", bench / "step0" / "rank"
    return compare({"npu_path": str(npu / "dump.json"), "bench_path": str(bench / "dump.json"),
                    "stack_path": str(npu / "stack.json")}, out, stack_mode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="where the dumps go (default: demo_output)")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    runs = {  # label: (dump path, bf16, fault)
        "fp32 (bench side)": (out / "fp32", False, False),
        "bf16 autocast (NPU side)": (out / "bf16", True, False),
        "bf16 with a 5% fc1 fault": (out / "bf16_fault", True, True),
    }
    for label, (path, bf16, fault) in runs.items():
        losses = train(path, bf16=bf16, fault=fault)
        dumps = sorted(path.glob("step*/rank*/dump.json"))
        print(f"{label:26s} losses {', '.join(f'{v:.6f}' for v in losses)}; {len(dumps)} step dumps in {path}")
    print()
    for label, name in (("bf16 autocast (NPU side)", "compare"), ("bf16 with a 5% fc1 fault", "compare_fault")):
        result = compare_step0(runs[label][0], out / "fp32", out / name)
        first = result.first_divergence
        verdict = "none: the difference is bf16 rounding" if first is None else first.entry
        print(f"{label} vs fp32, step 0 — first divergence: {verdict}")
        for kind, path in sorted(result.reports.items()):
            print(f"    {kind:5s} report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
