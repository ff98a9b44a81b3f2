"""MindSpore ↔ PyTorch: which PyTorch API, module class, argument and dtype a MindSpore dump name stands for.

A model ported from PyTorch to MindSpore calls ``mint.add`` where the original called ``torch.add``,
``ops.dense`` where it called ``F.linear``, and builds ``nn.Dense`` cells where it built ``nn.Linear``
modules. Comparing the two dumps (msprobe.core.compare with a cross-framework pair) and replaying a
MindSpore API against its PyTorch counterpart (MindSpore run_ut) both need that translation, so it
lives here once, as data (``framework_map.json`` beside this module), read without importing either
framework.

Rules of :func:`torch_api_for`, first that applies:

1. the explicit table ``apis`` (``Functional.dense`` → ``Functional.linear``; ``null`` = no counterpart);
2. ``Primitive.{attr}.{Class}``: the table ``primitives`` by class (``MatMul`` → ``Torch.matmul``);
3. ``Functional.{f}`` (``mindspore.ops``): ``Torch.{f}`` when ``torch.{f}`` is the same operation
   (list ``ops_in_torch``), ``Functional.{f}`` when it is in ``torch.nn.functional`` only
   (``ops_in_functional``), else no counterpart;
4. the namespaces that mirror PyTorch by design: ``Mint`` → ``Torch``, ``MintFunctional`` →
   ``Functional``, ``Tensor`` → ``Tensor``, ``Distributed`` → ``Distributed``.

The lists of rule 3 were derived from torch 2.13 and MindSpore 2.10 by name, then the functions
whose same-named PyTorch function does something else (``ops.gather`` is ``index_select``,
``ops.transpose`` is ``permute``, ``ops.select`` is ``where``) moved to the explicit table.

Arguments are paired by meaning: a MindSpore argument is the PyTorch argument of the same parameter name
(``LayerNorm(input_x, gamma, beta)``'s ``gamma`` is ``layer_norm(input, normalized_shape, weight, bias)``'s
``weight``). Both sides' parameter names come from ``framework_signatures.json``, generated from the installed
frameworks by ``tools/framework_signatures.py``; ``parameters`` renames MindSpore's names where the two
frameworks call one parameter differently (``gamma`` → ``weight``, ``axis`` → ``dim``), tried after the name
itself. A MindSpore parameter PyTorch has no parameter for (``pad_mode``) has no partner. An API without a
signature on either side keeps its positions. ``arguments``/``outputs`` hold explicit position maps, which
win (a user's ``-am`` file; BatchNorm's extra outputs).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from msprobe.core.naming import parse_name

DATA_FILE = Path(__file__).with_name("framework_map.json")
SIGNATURES_FILE = Path(__file__).with_name("framework_signatures.json")
MINDSPORE, PYTORCH = "mindspore", "pytorch"

ArgMap = dict[str, "str | None"]  # MindSpore row suffix (``input.1``) → PyTorch row suffix, None: no partner


@dataclass(frozen=True)
class FrameworkMap:
    """The translation tables; :func:`builtin` is the shipped one, :meth:`extended` adds a user's."""

    apis: dict[str, str | None]
    primitives: dict[str, str | None]
    namespaces: dict[str, str]
    ops_in_torch: frozenset[str]
    ops_in_functional: frozenset[str]
    arguments: dict[str, ArgMap]
    parameters: dict[str, str]  # MindSpore parameter name → PyTorch's, where they differ
    aliases: dict[str, str]
    cells: dict[str, str]
    dtypes: dict[str, str]
    outputs: dict[str, ArgMap] = field(default_factory=dict)
    signatures: dict[str, list[str]] = field(default_factory=dict)  # PyTorch API → parameter names ("*": kw-only)
    ms_signatures: dict[str, list[str]] = field(default_factory=dict)  # MindSpore API (Primitive.{Class}) → names

    def torch_api(self, ms_api: str) -> str | None:
        """``Mint.add`` → ``Torch.add``; also takes a full entry name (``Mint.add.0.forward``)."""
        ms_api = _api_of(ms_api)
        if ms_api in self.apis:
            return self.apis[ms_api]
        prefix, _, name = ms_api.partition(".")
        if not name:
            return None
        if prefix == "Primitive":
            return self.primitives.get(name.rsplit(".", 1)[-1])
        if prefix == "Functional":
            if name in self.ops_in_torch:
                return f"Torch.{name}"
            return f"Functional.{name}" if name in self.ops_in_functional else None
        target = self.namespaces.get(prefix)
        return f"{target}.{name}" if target else None

    def torch_class(self, ms_cls: str) -> str:
        """``Dense`` → ``Linear``; a class without an entry keeps its name (``Conv2d``, ``ReLU``)."""
        return self.cells.get(ms_cls, ms_cls)

    def torch_dtype(self, ms_dtype: str) -> str | None:
        """``Float32`` → ``torch.float32``; None for a name MindSpore does not use."""
        return self.dtypes.get(ms_dtype)

    def torch_suffix(self, ms_api: str, suffix: str, direction: str = "forward") -> str | None:
        """The PyTorch row suffix of a MindSpore row of API ``ms_api`` (``input.axis`` → ``input.1`` for
        ``softmax``), None when PyTorch has no such argument.

        Forward rows: an explicit position map first, else by parameter name (:meth:`torch_argument`).
        Without the forward call's rows, a backward entry's ``output.k`` (the gradient of input k) follows
        input k and its ``input.k`` output k (the compare maps a backward row through the forward call's
        tensor inputs instead: ``msprobe.core.compare.align``).
        """
        ms_api = _api_of(ms_api)
        part, dot, rest = suffix.partition(".")
        if direction == "backward" and part in ("input", "output"):
            twin = "output" if part == "input" else "input"
            mapped = self.torch_suffix(ms_api, f"{twin}{dot}{rest}")
            return None if mapped is None else mapped.replace(twin, part, 1)
        tables = self.outputs if part == "output" else self.arguments
        table = tables.get(ms_api, tables.get(_primitive_key(ms_api), {}))
        head = f"{part}.{rest.split('.', 1)[0]}" if rest else part
        if head in table:
            target = table[head]
            return None if target is None else target + suffix[len(head):]
        if part != "input" or not rest:
            return suffix
        word, dot, tail = rest.partition(".")
        target = self.torch_argument(ms_api, word)
        return None if target is None else f"input.{target}{dot}{tail}"

    def torch_argument(self, ms_api: str, word: str) -> str | None:
        """MindSpore argument ``word`` (a position or a keyword) of ``ms_api`` as PyTorch's parameter: a
        position stays a position where PyTorch takes that parameter positionally, a keyword becomes
        PyTorch's keyword (:meth:`positional` turns it into a position); None for a position whose
        parameter PyTorch does not have (``conv2d``'s ``pad_mode``).

        The name at a position comes from MindSpore's signature; it is looked up in PyTorch's signature
        as it is, then renamed (``parameters``). A position beyond MindSpore's named parameters (``*args``)
        or of an API without signatures on both sides stays as it is; a keyword PyTorch does not know is
        only renamed."""
        ms_names = self.ms_signatures.get(ms_api, self.ms_signatures.get(_primitive_key(ms_api)))
        pt_names = self.signatures.get(self.torch_api(ms_api) or "")
        name = word
        if word.isdigit():
            positional = _positional(ms_names or [])
            if pt_names is None or int(word) >= len(positional):
                return word
            name = positional[int(word)]
        for candidate in (name, self.parameters.get(name)):
            if candidate in (pt_names or ()):
                positions = _positional(pt_names)
                return str(positions.index(candidate)) if word.isdigit() and candidate in positions else candidate
        if word.isdigit() and "*args" in (pt_names or ()):
            return word  # PyTorch takes ``*args`` (``Tensor.to``): positions are all there is to go by
        return None if word.isdigit() else self.parameters.get(name, name)

    def positional(self, pt_api: str, suffix: str) -> str:
        """A keyword argument of a PyTorch API as its position (``Functional.batch_norm``'s ``input.weight``
        → ``input.3``), so calls that pass it either way pair; other suffixes stay as they are."""
        part, _, rest = suffix.partition(".")
        word, dot, tail = rest.partition(".")
        names = _positional(self.signatures.get(pt_api, []))
        if part != "input" or word.isdigit() or word not in names:
            return suffix
        return f"input.{names.index(word)}{dot}{tail}"

    def op_kind(self, pt_api: str) -> str:
        """What a PyTorch API computes, free of the namespace it was called through: ``Torch.add``,
        ``Tensor.__add__``, ``Tensor.add_`` → ``add``; ``Functional.relu`` and ``Torch.relu`` → ``relu``."""
        name = _api_of(pt_api).partition(".")[2] or pt_api
        name = self.aliases.get(name, name)
        if name.endswith("_") and not name.endswith("__"):
            name = name[:-1]
        return self.aliases.get(name, name)

    def ms_op_kind(self, ms_api: str) -> str | None:
        """The op kind of a MindSpore API (:meth:`op_kind` of its PyTorch counterpart), None without one."""
        target = self.torch_api(ms_api)
        return None if target is None else self.op_kind(target)

    def extended(self, apis: dict[str, str | None] | None = None, cells: dict[str, str] | None = None,
                 arguments: dict[str, ArgMap] | None = None, outputs: dict[str, ArgMap] | None = None) -> FrameworkMap:
        """A copy with a user's entries added (they win over the built-in ones)."""
        return replace(self, apis={**self.apis, **(apis or {})}, cells={**self.cells, **(cells or {})},
                       arguments={**self.arguments, **(arguments or {})}, outputs={**self.outputs, **(outputs or {})})


def _positional(names: list[str]) -> list[str]:
    """The named positional parameters of a signature list (those before ``*args`` or ``*``)."""
    cut = next((index for index, name in enumerate(names) if name.startswith("*")), len(names))
    return names[:cut]


def _primitive_key(ms_api: str) -> str:
    """``Primitive.bn_infer.BatchNorm`` → ``Primitive.BatchNorm``: per-primitive tables are keyed by class."""
    prefix, _, rest = ms_api.partition(".")
    return f"{prefix}.{rest.rsplit('.', 1)[-1]}" if prefix == "Primitive" else ms_api


def _api_of(name: str) -> str:
    """``Mint.add.0.forward`` → ``Mint.add``; a name without count and direction stays as it is."""
    if name.endswith((".forward", ".backward")):
        try:
            entry = parse_name(name)
        except ValueError:
            return name
        if not entry.is_module:
            return f"{entry.prefix}.{entry.api}"
    return name


@functools.lru_cache(maxsize=1)
def builtin() -> FrameworkMap:
    """The shipped tables, read once from ``framework_map.json``."""
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    signatures = json.loads(SIGNATURES_FILE.read_text(encoding="utf-8"))
    return FrameworkMap(
        apis=data["apis"], primitives=data["primitives"], namespaces=data["namespaces"],
        ops_in_torch=frozenset(data["ops_in_torch"]), ops_in_functional=frozenset(data["ops_in_functional"]),
        arguments=data["arguments"], parameters=data["parameters"], aliases=data["aliases"], cells=data["cells"],
        dtypes=data["dtypes"], outputs=data["outputs"], signatures=signatures["torch"],
        ms_signatures=signatures["mindspore"],
    )


def torch_api_for(ms_name: str) -> str | None:
    """The PyTorch dump API name of a MindSpore dump API name (``MintFunctional.relu`` → ``Functional.relu``),
    None when PyTorch has no counterpart. Full entry names (``Mint.add.0.forward``) are accepted too."""
    return builtin().torch_api(ms_name)


def torch_class_for(ms_cls: str) -> str:
    """The PyTorch module class of a MindSpore cell class (``SequentialCell`` → ``Sequential``)."""
    return builtin().torch_class(ms_cls)


def torch_dtype_for(ms_dtype: str) -> str | None:
    """``Float32`` → ``torch.float32``."""
    return builtin().torch_dtype(ms_dtype)


def torch_suffix_for(ms_api: str, suffix: str, direction: str = "forward") -> str | None:
    """The PyTorch argument (row suffix) of a MindSpore one; see :meth:`FrameworkMap.torch_suffix`."""
    return builtin().torch_suffix(ms_api, suffix, direction)
