"""What an offline ``run_ut`` replay needs before any framework runs: the entry names of a dump.json,
which of them a run checks, where a tensor dump's files are, and the seeded inputs of a statistics dump.

Shared by the framework replays (MindSpore's :mod:`msprobe.mindspore.run_ut`; the PyTorch replay has
the same rules), so that the same dump selects the same APIs and, with the same seed, generates the
same input values whichever framework replays it.

Generated values (statistics dumps) come from a numpy generator seeded with ``(seed, CRC-32 of the
entry name)``, so an API gets the same inputs whatever else the run checks: floats uniform in
``[Min, Max]``, integers uniform over ``Min..Max``, bools fair coin flips; a recorded ``Max``/``Min``
that is missing or not finite is replaced by ±1 (floats) or 0..1 (integers).
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.read import CompareError, DumpFile, load_json_file, read_dump
from msprobe.core.dump.uninitialised import UNINITIALISED_APIS
from msprobe.core.run_ut.report import RESULT_COLUMNS, ApiRow, read_done

# The "type" a dump.json gives a tensor value, in either framework.
TENSOR_TYPES = frozenset({
    "torch.Tensor", "torch.nn.parameter.Parameter", "torch.nn.Parameter",
    "mindspore.Tensor", "mindspore.Parameter", "mindspore.common.parameter.Parameter",
})
# Random (or uninitialised: msprobe.core.dump.uninitialised) results: two runs cannot agree, whatever the precision.
RANDOM_APIS = frozenset({
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "native_dropout",
    "fused_dropout", "rrelu", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "uniform", "exponential", "geometric", "cauchy", "log_normal", "random",
    "poisson", "gumbel_softmax", *UNINITIALISED_APIS,
})


@dataclass
class RunUtResult:
    """What a run did: the report's summary (counts, seed, bench, paths), how many APIs were judged, and
    the rows."""

    summary: dict[str, Any]
    checked: int
    rows: list[ApiRow] = field(default_factory=list)


class RunUtError(ValueError):
    """The inputs of the run cannot be used at all (exit 2): a bad dump.json, a missing tensor directory."""


class TensorFileError(RunUtError):
    """A tensor file named in dump.json is missing or unreadable. The PyTorch replay reports the API
    SKIP naming the file, judges the others and exits 2 at the end (docs/run_ut.md); a replay that does
    not catch it stops the run as any :class:`RunUtError` does."""


class Unreplayable(Exception):
    """This API cannot be replayed (it is reported SKIP with the reason)."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message: what a SKIP row says about an API that raised."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def widened(array: np.ndarray) -> np.ndarray:
    """A replay output as it is judged: floating values as float64, complex as complex128 (both exact),
    integers and bools as they are."""
    if np.issubdtype(array.dtype, np.complexfloating):
        return array.astype(np.complex128)
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float64)
    return array


def is_tensor_value(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in TENSOR_TYPES


def split_name(entry: str) -> tuple[str, str, str]:
    """``Mint.nn.functional.relu.0.forward`` → (``Mint``, ``nn.functional.relu``, ``0``)."""
    parts = entry.split(".")
    if parts and parts[-1] in ("forward", "backward"):
        parts = parts[:-1]
    if len(parts) < 3:
        return (parts[0] if parts else "", ".".join(parts[1:]), "")
    return parts[0], ".".join(parts[1:-1]), parts[-1]


def base_api(api: str) -> str:
    """The bare lower-case name, a trailing in-place ``_`` dropped (``add_`` → ``add``)."""
    name = api.split(".")[-1].lower()
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def is_inplace(api: str) -> bool:
    """Whether the API writes into its first argument (``add_``, ``__iadd__``, ``__setitem__``): it is
    replayed on copies of its inputs, and its backward is not replayed."""
    name = api.split(".")[-1]
    if name.startswith("__"):
        return name.startswith("__i") and name not in ("__invert__", "__index__", "__int__") or name == "__setitem__"
    return name.endswith("_")


def dedupe_key(prefix: str, api: str, entry: Mapping[str, Any]) -> str:
    """Same API name (without count), dtypes, shapes and non-tensor arguments → same key (``-f``)."""

    def strip(value: Any) -> Any:
        if isinstance(value, list):
            return [strip(v) for v in value]
        if is_tensor_value(value):
            return {"dtype": value.get("dtype"), "shape": value.get("shape")}
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        return value

    return json.dumps([prefix, api, strip(entry.get("input_args")), strip(entry.get("input_kwargs"))],
                      sort_keys=True, default=str)


def _listed(names: Collection[str], prefix: str, api: str) -> bool:
    return api in names or f"{prefix}.{api}" in names or base_api(api) in names


def select_apis(entries: Mapping[str, Any], done: Collection[str] = (), white_list: Collection[str] = (),
                black_list: Collection[str] = (), filter_duplicates: bool = False) -> list[str]:
    """The forward entries (``Mint.add.0.forward``) a run checks, in the dump's order: not ``done``
    (resuming), listed in ``white_list`` (when given), not in ``black_list``, and with
    ``filter_duplicates`` the first of each :func:`dedupe_key` group. A list entry matches the bare API
    (``add``), ``Prefix.api`` (``Mint.add``) or the API as written."""
    seen: set[str] = set()
    selected = []
    for name, entry in entries.items():
        if not name.endswith(".forward") or name.removesuffix(".forward") in done:
            continue
        prefix, api, _ = split_name(name)
        if white_list and not _listed(white_list, prefix, api):
            continue
        if black_list and _listed(black_list, prefix, api):
            continue
        if filter_duplicates:
            key = dedupe_key(prefix, api, entry if isinstance(entry, dict) else {})
            if key in seen:
                continue
            seen.add(key)
        selected.append(name)
    return selected


def rows_to_check(api_info: str | os.PathLike, csv_path: str | os.PathLike | None = None,
                  white_list: Collection[str] = (), black_list: Collection[str] = (),
                  filter_duplicates: bool = False, result_columns: tuple[str, ...] = RESULT_COLUMNS) -> list[str]:
    """The rows (``Mint.add.0``) a run over ``api_info`` checks (:func:`select_apis`, less the APIs already
    in the result CSV ``csv_path``, headed ``result_columns``): what ``multi_run_ut`` splits into parts. A
    :class:`RunUtError` for a dump.json that cannot be read."""
    try:
        dump = read_dump(api_info, "api_info")
    except CompareError as exc:
        raise RunUtError(str(exc)) from None
    done = read_done(csv_path, result_columns) if csv_path is not None else set()
    selected = select_apis(dump.entries, done, white_list, black_list, filter_duplicates)
    return [name.removesuffix(".forward") for name in selected]


def error_data_dir(output_dir: str | os.PathLike, error_data_path: str | os.PathLike | None) -> Path:
    """Where ``-save_error_data`` writes: ``error_data_path`` (the config's, as given: relative to the
    working directory) or, when not set, ``<output_dir>/error_data``."""
    return Path(error_data_path) if error_data_path is not None else Path(output_dir) / "error_data"


def tensor_dir(dump: DumpFile) -> Path:
    """Where a tensor dump's files are: ``dump_tensor_data`` next to dump.json, else the recorded
    ``dump_data_dir`` (absolute, or relative to dump.json's folder — never to the working directory).
    A :class:`RunUtError` when neither exists."""
    if dump.tensor_dir.is_dir():
        return dump.tensor_dir
    raw = load_json_file(dump.path, "api_info").get("dump_data_dir")
    if isinstance(raw, str) and raw and not Path(raw).is_absolute() and (dump.path.parent / raw).is_dir():
        return dump.path.parent / raw
    raise RunUtError(f"tensor directory {str(dump.tensor_dir)!r} of {str(dump.path)!r} does not exist "
                     f"(dump_data_dir {raw!r})")


def tensor_file(folder: Path, value: Mapping[str, Any]) -> Path:
    """The file of one tensor of a tensor dump; a :class:`TensorFileError` naming it when it is missing."""
    name = value.get("data_name")
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise RunUtError(f"a tensor in dump.json has no usable data_name ({name!r}): is this a task 'tensor' dump?")
    path = folder / name
    if not path.is_file():
        raise TensorFileError(f"tensor file {str(path)!r} is missing (named in dump.json)")
    return path


def rng_for(seed: int, entry: str) -> np.random.Generator:
    """The generator of one API's inputs (``entry``: its row name, ``Mint.add.0``)."""
    return np.random.default_rng([seed, zlib.crc32(entry.encode("utf-8"))])


def _bound(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else default


def recorded_shape(value: Mapping[str, Any]) -> list[int]:
    shape = value.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise Unreplayable(f"tensor without a usable shape: {shape!r}")
    return shape


def generate_values(value: Mapping[str, Any], kind: str, rng: np.random.Generator,
                    int_limits: tuple[int, int] | None = None) -> np.ndarray:
    """The values of a tensor of a statistics dump, drawn from its recorded shape and [Min, Max]:
    ``kind`` ``float`` (float64 array, to be cast to the recorded dtype), ``int`` (int64, clipped to
    ``int_limits``, the dtype's range) or ``bool``."""
    shape = recorded_shape(value)
    if kind == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if kind == "float":
        low, high = _bound(value.get("Min"), -1.0), _bound(value.get("Max"), 1.0)
        low, high = min(low, high), max(low, high)
        array = rng.uniform(low, high, size=shape) if high > low else np.full(shape, low)
        return np.asarray(array, dtype=np.float64)
    if kind != "int":
        raise Unreplayable(f"generating {value.get('dtype')} inputs from statistics is not supported")
    lo_limit, hi_limit = int_limits if int_limits is not None else (-(2 ** 63), 2 ** 63 - 1)
    low = int(max(_bound(value.get("Min"), 0), lo_limit))
    high = int(min(_bound(value.get("Max"), 1), hi_limit))
    low, high = min(low, high), max(low, high)
    return rng.integers(low, high, size=shape, endpoint=True).astype(np.int64)

