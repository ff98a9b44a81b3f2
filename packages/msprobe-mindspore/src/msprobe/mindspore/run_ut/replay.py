"""Replay the ``Mint.*``, ``MintFunctional.*`` and supported ``Tensor.*`` APIs of a MindSpore dump and
judge each against a high-precision bench (docs/mindspore/run_ut.md).

Every forward entry is run twice from the same input numbers: on the *device* (MindSpore, PyNative, at
the recorded dtype) and on the *bench* — PyTorch on CPU when torch is importable (the API's counterpart
from :mod:`msprobe.core.compare.align.framework_map`), else MindSpore itself — with floating inputs upcast
(float16/bfloat16 → float32, float32 → float64). Outputs are judged by
:func:`msprobe.core.run_ut.judge_output`, the API by :func:`~msprobe.core.run_ut.api_status`. When the
dump has the API's backward entry, the input gradients for the recorded output gradients are computed
on both sides and judged too. Files: :mod:`msprobe.core.run_ut.report` with the details columns of
1.1.1's MindSpore checker (:mod:`.details`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from msprobe.core.compare.read import CompareError, read_dump
from msprobe.core.run_ut import ERROR, SKIP, api_status, judge_output
from msprobe.core.run_ut.drive import check_apis
from msprobe.core.run_ut.lists import RunUtSection, list_names, read_run_ut_section
from msprobe.core.run_ut.replay_common import (
    RANDOM_APIS,
    RunUtError,
    RunUtResult,
    Unreplayable,
    base_api,
    error_data_dir,
    first_line,
    is_inplace,
    rng_for,
    split_name,
    tensor_dir,
)
from msprobe.core.run_ut.report import NOT_APPLICABLE, ApiRow, OutputRow, Report, api_row, output_row, report_dir
from msprobe.mindspore.run_ut.details import MINDSPORE_DETAILS
from msprobe.mindspore.run_ut.sides import MindSporeSide, Side, round_to
from msprobe.mindspore.run_ut.values import RECORDED, InputSource, Leaf, grad_slots, rebuild

DEFAULT_SEED = 1234
BENCHES = ("auto", "torch", "mindspore")
CHECKED_PREFIXES = ("Mint", "MintFunctional", "Tensor")
# Tensor methods checked: numerically comparable, and called the same way in MindSpore and PyTorch
# (checked on MindSpore 2.10 / torch 2.13; ``std``/``var`` are not: their correction defaults differ).
SUPPORTED_TENSOR_APIS = frozenset("""
    abs add addcmul addmm all amax any argmax astype bmm ceil chunk clamp clone contiguous cos cumprod cumsum div erf
    exp expand_as expm1 flatten flip float floor floor_divide fmod gather half index_select isnan lerp log log1p
    log2 logical_not logsumexp masked_fill matmul max maximum mean min minimum mm mul nan_to_num neg norm outer
    permute pow prod reciprocal remainder repeat reshape round rsqrt sigmoid sign sin softmax sort split sqrt
    square squeeze sub sum swapaxes t tanh topk transpose tril triu trunc type_as unsqueeze view view_as where
    add_ sub_ mul_ div_ clamp_ masked_fill_ fill_ zero_ copy_ floor_
    __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __matmul__ __neg__ __abs__
    __pow__ __getitem__ __setitem__ __eq__ __ne__ __gt__ __ge__ __lt__ __le__ __iadd__ __isub__ __imul__
    __itruediv__
""".split())


def torch_available() -> bool:
    """Whether ``import torch`` works here (the import is needed by the bench anyway)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def choose_bench(bench: str) -> str:
    """``torch`` or ``mindspore`` for ``-bench`` ``auto`` (PyTorch when importable), ``torch`` or
    ``mindspore``; a :class:`RunUtError` for another value or for ``torch`` without torch."""
    if bench not in BENCHES:
        raise RunUtError(f"-bench {bench!r}: allowed are {', '.join(BENCHES)}")
    if bench == "auto":
        return "torch" if torch_available() else "mindspore"
    if bench == "torch" and not torch_available():
        raise RunUtError("-bench torch: torch is not installed (pip install 'msprobe-mindspore[run_ut]', "
                         "or use -bench mindspore)")
    return bench


@lru_cache(maxsize=1)
def _api_table() -> dict[str, tuple[Any, str]]:
    """``Mint.add`` → (owner, attribute): the table the interceptor patches, read back."""
    from msprobe.mindspore.hooks.catalog import api_targets

    return {f"{t.prefix}.{t.attr}": (t.owner, t.attr) for t in api_targets()}


def resolve(prefix: str, api: str) -> Callable[..., Any] | None:
    """The MindSpore callable recorded as ``prefix.api`` (outside recording: the original)."""
    found = _api_table().get(f"{prefix}.{api}")
    if found is None:
        return None
    obj = getattr(*found, None)
    return obj if callable(obj) else None


def load_run_ut_section(config_path: str | os.PathLike | None) -> RunUtSection:
    """The ``run_ut`` section of a config.json, its lists checked against MindSpore's API table
    (:func:`msprobe.core.run_ut.lists.read_run_ut_section`)."""
    return read_run_ut_section(config_path, "mindspore", lambda: list_names(_api_table(), base_api))


def unchecked_reason(prefix: str, api: str) -> str | None:
    """Why ``prefix.api`` is not checked (SKIP message), None when it is."""
    if prefix in ("Cell", "Module"):
        return "a cell, not an API: run_ut replays APIs"
    if prefix == "Distributed":
        return "distributed API: not replayed"
    if prefix not in CHECKED_PREFIXES:
        return f"{prefix} APIs are not checked (Mint, MintFunctional and supported Tensor methods are)"
    if prefix == "Tensor" and api not in SUPPORTED_TENSOR_APIS:
        return f"Tensor.{api} is not among the supported Tensor methods"
    if base_api(api) in RANDOM_APIS:
        return "random API: not numerically comparable"
    return None


def _recorded_name(dtype: str) -> str:
    return RECORDED.get(dtype, dtype)


class Replayer:
    """Replays the entries of one dump.json (see :func:`run_ut`)."""

    def __init__(self, dump_path: str | os.PathLike, bench: str, seed: int,
                 api_override: Mapping[str, Callable[..., Any]] | None, error_dir: Path | None) -> None:
        try:
            self.dump = read_dump(dump_path, "api_info")
        except CompareError as exc:
            raise RunUtError(str(exc)) from None
        if self.dump.task not in ("tensor", "statistics"):
            raise RunUtError(f"api_info {str(dump_path)!r}: task {self.dump.task!r}; run_ut replays 'tensor' and "
                             f"'statistics' dumps")
        self.tensor_mode = self.dump.task == "tensor"
        self.source = InputSource(tensor_dir(self.dump) if self.tensor_mode else None, round_to)
        self.seed, self.bench_name = seed, bench
        self.device = MindSporeSide(upcast=False)
        if bench == "torch":
            from msprobe.mindspore.run_ut.torch_bench import TorchSide

            self.bench: Side = TorchSide()
        else:
            self.bench = MindSporeSide(upcast=True)
        self.override = dict(api_override or {})
        self.error_dir = error_dir

    def _bench_call(self, prefix: str, api: str, func: Callable[..., Any], kwargs: dict) -> tuple[Callable, dict]:
        if self.bench_name != "torch":
            return func, kwargs
        from msprobe.mindspore.run_ut.torch_bench import torch_callable, torch_kwargs

        return torch_callable(prefix, api), torch_kwargs(prefix, api, kwargs)

    # --- one API --------------------------------------------------------------------------------------

    def check(self, entry_name: str, entry: dict, backward: dict | None) -> ApiRow:
        row_name = entry_name.removesuffix(".forward")
        prefix, api, _ = split_name(entry_name)
        back = NOT_APPLICABLE if backward is None else SKIP
        reason = unchecked_reason(prefix, api)
        if reason is not None:
            return ApiRow(row_name, SKIP, back, reason)
        func = resolve(prefix, api)
        if func is None:
            return ApiRow(row_name, SKIP, back, f"{prefix}.{api} is not an API of this MindSpore")
        try:
            return self._replay(row_name, prefix, api, entry, backward, func)
        except Unreplayable as exc:
            return ApiRow(row_name, SKIP, back, f"cannot replay: {exc}")
        except _SideFailed as exc:
            return ApiRow(row_name, SKIP, back, str(exc))

    def _replay(self, row_name: str, prefix: str, api: str, entry: dict, backward: dict | None,
                func: Callable[..., Any]) -> ApiRow:
        args_v, kwargs_v = entry.get("input_args") or [], entry.get("input_kwargs") or {}
        if not isinstance(args_v, list) or not isinstance(kwargs_v, dict):
            raise Unreplayable("input_args/input_kwargs are not a list and an object")
        rng = rng_for(self.seed, row_name)
        args = rebuild(args_v, lambda v: self.source.leaf(v, rng))
        kwargs = rebuild(kwargs_v, lambda v: self.source.leaf(v, rng))
        device_func = self.override.get(f"{prefix}.{api}", func)
        bench_func, bench_kwargs = self._bench_call(prefix, api, func, kwargs)
        d_flat, _ = _side_run("device", self.device.forward, device_func, args, kwargs)
        b_flat, _ = _side_run("bench", self.bench.forward, bench_func, args, bench_kwargs)
        if len(d_flat) != len(b_flat):
            return ApiRow(row_name, ERROR, SKIP if backward else NOT_APPLICABLE,
                          f"device gave {len(d_flat)} outputs, bench {len(b_flat)}")
        forward = [self._judge(f"{row_name}.forward.output.{i}", d, b) for i, (d, b) in enumerate(zip(d_flat, b_flat))]
        replayed, grads = None, ([], [])
        if backward is not None:
            status, rows, note, grads = self._backward(row_name, api, backward, rng, args, kwargs,
                                                       (device_func, bench_func, bench_kwargs))
            replayed = status, rows, note
        row = api_row(row_name, forward, replayed)
        if self.error_dir is not None and ERROR in (row.forward, row.backward):
            self._save(row_name, args, kwargs, d_flat, b_flat, grads)
        return row

    def _judge(self, name: str, d: Any, b: Any, gradient_scale: float | None = None) -> OutputRow:
        dn, bn = self.device.to_numpy(d), self.bench.to_numpy(b)
        d_dtype, b_dtype = self.device.dtype_name(d), self.bench.dtype_name(b)
        verdict = judge_output(name, d_dtype, dn, bn, gradient_scale=gradient_scale)
        return output_row(name, _recorded_name(b_dtype), _recorded_name(d_dtype), dn, bn, verdict)

    def _backward(self, row_name: str, api: str, backward: dict, rng: np.random.Generator, args: tuple,
                  kwargs: dict, funcs: tuple) -> tuple[str, list[OutputRow], str, tuple[list, list]]:
        device_func, bench_func, bench_kwargs = funcs
        none: tuple[list, list] = ([], [])
        if is_inplace(api):
            return SKIP, [], "in-place API: backward not replayed", none
        slots = grad_slots(args, kwargs)
        recorded_in, recorded_out = backward.get("input"), backward.get("output")
        if not slots:
            return SKIP, [], "no floating input to take a gradient for", none
        if not isinstance(recorded_in, list) or not isinstance(recorded_out, list) or len(recorded_out) != len(slots):
            return SKIP, [], "the recorded gradients do not match the API's floating inputs", none
        output_grads = [self.source.leaf(v, rng) for v in recorded_in if v is not None]
        try:
            d_grads = _side_run("device", self.device.backward, device_func, args, kwargs, slots, output_grads)
            b_grads = _side_run("bench", self.bench.backward, bench_func, args, bench_kwargs, slots, output_grads)
        except _SideFailed as exc:
            return SKIP, [], str(exc), none
        scale = max((float(np.linalg.norm(np.abs(g.values).astype(np.float64))) for g in output_grads), default=None)
        rows = [self._judge(f"{row_name}.backward.output.{k}", dg, bg, scale)
                for k, (dg, bg) in enumerate(zip(d_grads, b_grads)) if dg is not None or bg is not None]
        status = api_status([r.verdict for r in rows])
        return status, rows, "" if rows else "no input gradient computed", (d_grads, b_grads)

    def _save(self, row_name: str, args: tuple, kwargs: dict, d_flat: list, b_flat: list,
              grads: tuple[list, list]) -> None:
        """``-save_error_data``: the inputs, both outputs and both input gradients as ``.npy``."""
        assert self.error_dir is not None
        folder = self.error_dir / row_name
        folder.mkdir(parents=True, exist_ok=True)
        leaves: list[Leaf] = []
        _leaves((args, kwargs), leaves)
        groups = {"input": [leaf.values for leaf in leaves],
                  "device_output": [self.device.to_numpy(v) for v in d_flat],
                  "bench_output": [self.bench.to_numpy(v) for v in b_flat],
                  "device_input_grad": [self.device.to_numpy(v) for v in grads[0] if v is not None],
                  "bench_input_grad": [self.bench.to_numpy(v) for v in grads[1] if v is not None]}
        for label, items in groups.items():
            for i, array in enumerate(items):
                np.save(folder / f"{label}.{i}.npy", np.asarray(array), allow_pickle=False)


class _SideFailed(Exception):
    """One side raised while replaying (the message names the side)."""


def _side_run(side: str, run: Callable[..., Any], *args: Any) -> Any:
    try:
        result = run(*args)
    except (Unreplayable, RunUtError):
        raise
    except Exception as exc:
        raise _SideFailed(f"replay failed on the {side}: {type(exc).__name__}: {first_line(exc)}") from exc
    return result


def _leaves(value: Any, out: list[Leaf]) -> None:
    if isinstance(value, Leaf):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)


def run_ut(api_info: str | os.PathLike, output_dir: str | os.PathLike = ".", *, bench: str = "auto",
           save_error_data: bool = False, csv_path: str | os.PathLike | None = None,
           filter_duplicates: bool = False, white_list: tuple[str, ...] = (), black_list: tuple[str, ...] = (),
           seed: int = DEFAULT_SEED, api_override: Mapping[str, Callable[..., Any]] | None = None,
           apis: Collection[str] | None = None, error_data_path: str | os.PathLike | None = None) -> RunUtResult:
    """Replay the checked APIs of ``api_info`` (a MindSpore dump.json) and write the result, details and
    summary files into ``output_dir`` (or, resuming, next to ``csv_path``).

    ``bench``: ``auto`` (PyTorch when importable, else MindSpore), ``torch`` or ``mindspore``.
    ``api_override`` maps ``Prefix.api`` (``Mint.add``) to a callable run on the device side in place of
    the API (a testing and debugging hook: the bench always runs the real API). ``apis``: check only these
    rows (``Mint.add.0``) of the selection (how ``multi_run_ut`` runs its parts). ``error_data_path``:
    where ``save_error_data`` writes (default ``<output>/error_data``). Raises :class:`RunUtError` for
    unusable inputs.
    """
    chosen = choose_bench(bench)
    out = report_dir(output_dir, csv_path)
    error_dir = error_data_dir(out, error_data_path) if save_error_data else None
    replayer = Replayer(api_info, chosen, seed, api_override, error_dir)
    report = Report(out, csv_path, MINDSPORE_DETAILS)
    checked = check_apis(replayer, replayer.dump.entries, report, white_list=white_list, black_list=black_list,
                         filter_duplicates=filter_duplicates, apis=apis)
    bench_text = ("PyTorch (CPU)" if chosen == "torch" else "MindSpore") + \
        ", float16/bfloat16 -> float32, float32 -> float64"
    summary = report.summary(api_info=str(api_info), task=replayer.dump.task, framework="mindspore",
                             device="MindSpore, recorded dtype", bench=bench_text,
                             seed=seed if not replayer.tensor_mode else None,
                             inputs="dump tensors" if replayer.tensor_mode else "generated from statistics",
                             white_list=list(white_list), black_list=list(black_list),
                             filter_duplicates=filter_duplicates, checked=checked)
    return RunUtResult(summary, checked, report.rows)
