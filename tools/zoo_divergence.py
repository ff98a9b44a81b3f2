"""Which entry does compare name as the first divergence on real architectures?

For each model of the test zoo (``tests/pytorch/zoo.py``): one training step in bf16 autocast with ONE
middle-layer weight scaled by 1.05, against the same model in fp32 without the fault; then the fp32
run with the fault against the fp32 run without it; then bf16 without a fault against fp32. Prints the
entry each comparison names, and whether it lies in the faulted layer (mix: the layer's module or an
API whose construct.json parent chain reaches it).

    python tools/zoo_divergence.py [--task statistics|tensor] [--level mix|L0|L1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pytorch"))
from zoo import FAULTED, ZOO, dump_one_step, in_layer  # noqa: E402

from msprobe.pytorch import compare  # noqa: E402


def named(npu: Path, bench: Path, out: Path) -> str | None:
    result = compare({"npu_path": str(npu / "dump.json"), "bench_path": str(bench / "dump.json"),
                      "stack_path": str(npu / "stack.json")}, str(out))
    return None if result.first_divergence is None else result.first_divergence.entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="statistics", choices=("statistics", "tensor"))
    parser.add_argument("--level", default="mix", choices=("mix", "L0", "L1"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.getLogger("msprobe").setLevel(logging.ERROR)
    root = Path(args.out or tempfile.mkdtemp(prefix="zoo_divergence_"))
    print("| model | faulted layer | bf16+fault vs fp32 | in layer | fp32+fault vs fp32 | in layer "
          "| bf16 vs fp32 (no fault) |")
    print("|---|---|---|---|---|---|---|")
    for spec in ZOO:
        layer = FAULTED[spec.name]
        base = root / spec.name
        fp32 = dump_one_step(spec, base / "fp32", args.task, args.level, None, None)
        bf16_fault = dump_one_step(spec, base / "bf16_fault", args.task, args.level, torch.bfloat16, layer)
        fp32_fault = dump_one_step(spec, base / "fp32_fault", args.task, args.level, None, layer)
        bf16 = dump_one_step(spec, base / "bf16", args.task, args.level, torch.bfloat16, None)
        construct = json.loads((fp32 / "construct.json").read_text())
        a = named(bf16_fault, fp32, base / "cmp_bf16_fault")
        b = named(fp32_fault, fp32, base / "cmp_fp32_fault")
        c = named(bf16, fp32, base / "cmp_bf16")
        print(f"| {spec.name} | {layer} | {a} | {in_layer(a, layer, construct)} | {b} "
              f"| {in_layer(b, layer, construct)} | {c} |")


if __name__ == "__main__":
    main()
