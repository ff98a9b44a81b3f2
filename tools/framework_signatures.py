"""Write ``msprobe/core/compare/align/framework_signatures.json``: the parameter names of every MindSpore API
msprobe records and of its PyTorch counterpart, read from the installed frameworks.

The cross-framework compare pairs a MindSpore argument with the PyTorch argument of the same meaning
(``LayerNorm(input_x, gamma, beta)``'s ``gamma`` is ``layer_norm(input, normalized_shape, weight, bias)``'s
``weight``), by name. ``msprobe.core`` imports neither framework, so the names are read here once and shipped
as data; ``tests/mindspore/test_cross_framework_map.py`` checks the shipped file against this script's
output on the installed frameworks. Run from the repository root after upgrading either framework::

    .venv/bin/python tools/framework_signatures.py

Sources, first that gives names: ``inspect.signature`` (Python functions; MindSpore's generated primitives'
``__call__``); a PyTorch builtin's docstring head (``matmul(input, other, *, out=None) -> Tensor``); a
MindSpore primitive's documented ``Inputs:`` list (primitives whose ``__call__`` takes ``*args``). Only
positional parameters are kept (``*args`` marks where any number more may follow), then ``*`` and
the keyword-only ones; a method's ``self`` is named ``input``, as the
dumps record it as argument 0.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "packages" / "msprobe-common" / "src" / "msprobe" / "core" / "compare" / "align"
OUT = OUT / "framework_signatures.json"
_DOC_HEAD = re.compile(r"^\s*(?:\.\. function:: )?([A-Za-z_][\w.]*)\((.*?)\)\s*->", re.M)
_DOC_INPUT = re.compile(r"^\s*-\s+\*\*(\w+)\*\*", re.M)


def _from_signature(obj, method: bool) -> list[str] | None:
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None
    names, keywords = [], []
    for parameter in parameters:
        if parameter.kind == parameter.KEYWORD_ONLY:
            keywords.append(parameter.name)
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
        elif parameter.kind == parameter.VAR_POSITIONAL:
            names.append("*args")
    if method and names and names[0] == "self":
        names[0] = "input"
    if names and names[0] == "self":
        names = names[1:]
    return _listed(names, keywords)


def _listed(names: list[str], keywords: list[str]) -> list[str]:
    """Positional names (``*args`` where the function takes any number more), then ``*`` and the
    keyword-only names when there are any."""
    return [*names, "*", *keywords] if keywords else names


def _positional_count(listed: list[str]) -> int:
    return len([name for name in listed[: listed.index("*") if "*" in listed else len(listed)] if name != "*args"])


def _from_doc_head(obj, method: bool) -> list[str] | None:
    """The overload with the most positional parameters among the docstring's heads (``max(input)``,
    ``max(input, dim, keepdim=False, *, out=None)``)."""
    best: list[str] | None = None
    for match in _DOC_HEAD.finditer(getattr(obj, "__doc__", None) or ""):
        if match.group(1).rsplit(".", 1)[-1] != obj.__name__:
            continue
        names, keywords, star = [], [], False
        for item in match.group(2).split(","):
            item = item.strip().split("=")[0].split(":")[0].strip()
            if item.startswith("*"):
                names += ["*args"] if item not in ("*", "**kwargs") and not star else []
                star = True
            elif item and item != "/" and item != "out":
                (keywords if star else names).append(item)
        names = ["input", *names] if method else names
        if best is None or len(names) > _positional_count(best):
            best = _listed(names, keywords)
    return best


def torch_names(pt_api: str) -> list[str] | None:
    import torch
    import torch.nn.functional as F

    owners = {"Torch": torch, "Functional": F, "Tensor": torch.Tensor, "Distributed": torch.distributed}
    prefix, _, name = pt_api.partition(".")
    obj = getattr(owners.get(prefix), name, None)
    if obj is None:
        return None
    method = prefix == "Tensor"
    return _from_signature(obj, method) if _from_signature(obj, method) is not None else _from_doc_head(obj, method)


def mindspore_names(target) -> list[str] | None:
    obj = getattr(target.owner, target.attr, None)
    method = target.prefix == "Tensor"
    return None if obj is None else _from_signature(obj, method)


def primitive_names(cls_name: str) -> list[str] | None:
    from mindspore import ops

    cls = getattr(ops, cls_name, None)
    if cls is None:
        return None
    names = _from_signature(cls.__call__, False)
    if names and _positional_count(names):
        return names
    doc = cls.__doc__ or ""
    start = doc.find("Inputs:")
    end = doc.find("Outputs:", start)
    return _DOC_INPUT.findall(doc[start:end]) or None if start >= 0 else None


def generate() -> dict:
    """The file's content, from the installed frameworks and the built-in map."""
    import mindspore
    import torch

    from msprobe.core.compare.align.framework_map import builtin
    from msprobe.mindspore.hooks.catalog import api_targets

    fmap = builtin()
    ms_names: dict[str, list[str]] = {}
    pt_apis: set[str] = set()
    for target in api_targets():
        api = f"{target.prefix}.{target.attr}"
        pt_api = fmap.torch_api(api)
        if pt_api is None:
            continue
        pt_apis.add(pt_api)
        names = mindspore_names(target)
        if names:
            ms_names[api] = names
    for cls_name, pt_api in fmap.primitives.items():
        if pt_api is None:
            continue
        pt_apis.add(pt_api)
        names = primitive_names(cls_name)
        if names:
            ms_names[f"Primitive.{cls_name}"] = names
    pt_names = {api: names for api in pt_apis if (names := torch_names(api))}
    return {
        "about": f"Positional parameter names, generated by tools/framework_signatures.py from mindspore "
                 f"{mindspore.__version__} and torch {torch.__version__.split('+')[0]}; do not edit by hand.",
        "mindspore": dict(sorted(ms_names.items())),
        "torch": dict(sorted(pt_names.items())),
    }


def render(data: dict) -> str:
    """One API per line: reviewable diffs."""
    lines = ["{", f'  "about": {json.dumps(data["about"])},']
    for side in ("mindspore", "torch"):
        items = [f"    {json.dumps(api)}: {json.dumps(names)}" for api, names in data[side].items()]
        lines += [f'  "{side}": {{', ",\n".join(items), "  }" + ("," if side == "mindspore" else "")]
    return "\n".join(lines) + "\n}\n"


def main() -> int:
    OUT.write_text(render(generate()), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
