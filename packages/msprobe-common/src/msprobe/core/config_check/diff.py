"""What differs between two packs, section by section, those that change numbers first
(docs/config_check.md#the-report)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from msprobe.core.config_check.environment import NUMERIC_PREFIXES, NUMERIC_VARIABLES
from msprobe.core.config_check.pack import SECTIONS

CHANGED, ONLY_A, ONLY_B = "changed", "only in A", "only in B"
# packages whose version is part of the numbers: frameworks, kernels, math and model libraries
NUMERIC_PACKAGES = re.compile(
    r"^(torch|torch-npu|torchvision|torchaudio|mindspore|numpy|scipy|transformers|accelerate|deepspeed|"
    r"megatron.*|apex|flash-attn|triton|xformers|peft|datasets|tokenizers|safetensors|mkl.*|intel-openmp|"
    r"nvidia-.*|jax|jaxlib|onnxruntime.*|bitsandbytes|liger-kernel|vllm)$")
# hyperparameters that name places or the run, not numbers
NOT_NUMERIC_FLAG = re.compile(r"(dir|path|file|out|log|save|load|name|port|addr|host|project|wandb|tensorboard)",
                              re.IGNORECASE)


@dataclass(frozen=True)
class Difference:
    section: str
    item: str
    a: str
    b: str
    kind: str  # changed, only in A, only in B
    changes_numbers: bool


def _flat(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        if not value:
            return {prefix: "{}"} if prefix else {}
        flat: dict[str, str] = {}
        for key, inner in value.items():
            flat.update(_flat(inner, f"{prefix} / {key}" if prefix else str(key)))
        return flat
    return {prefix: "" if value is None else str(value)}


def _random_items(section: dict) -> dict[str, str]:
    """A random section as items: each call site's count (and seed arguments), then each seed."""
    items = {}
    for site, record in (section.get("calls") or {}).items():
        seeds = record.get("seeds")
        items[f"call {site}"] = f"{record.get('count')} call(s)" + (f", seeds ({'; '.join(seeds)})" if seeds else "")
    items.update({f"seed {k}": v for k, v in _flat(section.get("seeds") or {}).items()})
    return items


def _changes_numbers(section: str, item: str) -> bool:
    if section == "packages":
        return NUMERIC_PACKAGES.match(item) is not None
    if section == "environment":
        return item in NUMERIC_VARIABLES or item.startswith(NUMERIC_PREFIXES)
    if section == "hyperparameters":
        return NOT_NUMERIC_FLAG.search(item) is None
    return True


def diff_section(section: str, a: dict | None, b: dict | None) -> list[Difference]:
    items = _random_items if section == "random" else _flat
    left, right = items(a or {}), items(b or {})
    rows = []
    for item in sorted(set(left) | set(right)):
        if item in left and item in right and left[item] == right[item]:
            continue
        kind = CHANGED if item in left and item in right else (ONLY_A if item in left else ONLY_B)
        rows.append(Difference(section, item, left.get(item, ""), right.get(item, ""), kind,
                               _changes_numbers(section, item)))
    return rows


def diff_packs(a: tuple[str, dict[str, dict]], b: tuple[str, dict[str, dict]]) -> list[Difference]:
    """Every difference of two packs ``(framework, sections)``: those that change numbers first, then by
    section in :data:`SECTIONS` order, then by item. A section one pack lacks is compared as empty."""
    rows = []
    if a[0] != b[0]:
        rows.append(Difference("framework", "framework", a[0], b[0], CHANGED, True))
    for section in SECTIONS:
        if section in a[1] or section in b[1]:
            rows += diff_section(section, a[1].get(section), b[1].get(section))
    order = {name: index for index, name in enumerate(SECTIONS)}
    return sorted(rows, key=lambda r: (not r.changes_numbers, order[r.section]))
