"""msprobe quickstart (``make demo``): dump a small model in fp32 and under bf16 autocast, then compare.

The same model, data and seed run for three training steps in plain fp32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` — the situation of a user whose loss drifts after a
change of precision or device. Each run is dumped with PrecisionDebugger (task tensor, level mix),
and each bf16 dump (the "NPU" side) is compared with the fp32 one (the bench side):

- the plain bf16 run differs from fp32 only by bf16 rounding, so no first divergence is named;
- a second bf16 run has a fault — ``fc1``'s weight 5% off, as a broken kernel would make it — and the
  comparison names the first entry of ``fc1`` as the first divergence.

Then the API pre-check (``run_ut``, docs/run_ut.md) replays every API of the bf16 dump on CPU against a
float32 bench and prints the failing APIs: none for the real kernels (bf16 batch_norm, which rounds its
intermediate steps, gets a Warning); then once more with a deliberately wrong ``gelu`` on the device side
(the ``api_override`` test hook: 2% too large), which it names with its worst elements.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger, compare, seed_all
from msprobe.pytorch.run_ut.replay import run_ut


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


def precheck(dump_json: Path, out: Path, label: str, api_override=None) -> None:
    """run_ut on one dump; print the APIs judged ``error`` (and those with a ``Warning``: worth a look)."""
    result = run_ut(dump_json, out, api_override=api_override)

    def named(status: str) -> str:
        rows = [r for r in result.rows if status in (r.forward, r.backward)]
        return ", ".join(f"{r.name} (forward {r.forward}, backward {r.backward})" for r in rows) or "none"

    print(f"pre-check {label}: {result.checked} APIs judged; failing (error): {named('error')}; "
          f"Warning: {named('Warning')}")
    for failure in result.summary["failures"][:2]:
        worst = failure["worst"][0] if failure["worst"] else {}
        print(f"    {failure['output']}: worst element {worst.get('index')}: device {worst.get('device')}, "
              f"bench {worst.get('bench')}")
    print(f"    results: {result.summary['result_csv']}")


def _wrong_gelu(*args, **kwargs):
    return nn.functional.gelu(*args, **kwargs) * 1.02


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
    print()
    bf16_dump = out / "bf16" / "step0" / "rank" / "dump.json"
    precheck(bf16_dump, out / "run_ut", "of the bf16 dump")
    precheck(bf16_dump, out / "run_ut_wrong_gelu", "with a wrong gelu kernel",
             api_override={"Functional.gelu": _wrong_gelu})
    return 0


if __name__ == "__main__":
    sys.exit(main())
