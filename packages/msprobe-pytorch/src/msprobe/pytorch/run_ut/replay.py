"""Replay the APIs of a dump.json and judge each against a high-precision bench (docs/run_ut.md).

Every forward entry (``Torch.*``, ``Tensor.*`` including operator dunders, ``Functional.*``, ``VF.*``) is
run twice: on the *device* at its recorded dtype, and on the CPU *bench* with floating-point tensors
upcast (float16/bfloat16 → float32, float32 → float64). Outputs are judged by
:func:`msprobe.core.run_ut.judge_output`, the API by :func:`~msprobe.core.run_ut.api_status`. When
the dump has the API's backward entry, the backward is replayed on both sides with the recorded
gradient of the outputs (generated, for a statistics dump) and the input gradients are judged too.

An API recorded with low-precision outputs from float32 inputs (autocast) runs its device side in the
output dtype, as autocast did, and its bench in float32. An API whose tensor file is missing or unreadable
is reported SKIP naming the file (``ApiRow.input_error``); the others are judged, and the command exits 2.
Rebuilding and running an entry's call is :mod:`msprobe.pytorch.run_ut.call`, which attribution uses too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.compare.read import CompareError, DumpFile, read_dump
from msprobe.core.run_ut import ERROR, SKIP, api_status, judge_output
from msprobe.core.run_ut.drive import check_apis
from msprobe.core.run_ut.lists import RunUtSection, list_names, read_run_ut_section
from msprobe.core.run_ut.replay_common import (
    RunUtResult,
    base_api,
    error_data_dir,
    is_tensor_value,
    rng_for,
    tensor_dir,
    widened,
)
from msprobe.core.run_ut.report import NOT_APPLICABLE, ApiRow, OutputRow, Report, api_row, output_row, report_dir
from msprobe.pytorch.run_ut.call import Call, Refused, Side, api_table, replay_entry
from msprobe.pytorch.run_ut.inputs import RunUtError, TensorSource
from msprobe.pytorch.tensor_files import host_numpy, load_pt

DEFAULT_SEED = 1234


def replayer_for_dump(dump_path: str | os.PathLike, device: torch.device, seed: int,
                      api_override: Mapping[str, Callable[..., Any]] | None = None,
                      error_dir: Path | None = None) -> tuple[Replayer, DumpFile]:
    """A replayer of the entries of one dump.json (task tensor: its files; statistics: generated
    inputs), and the dump."""
    try:
        dump = read_dump(dump_path, "api_info")
    except CompareError as exc:
        raise RunUtError(str(exc)) from None
    if dump.task not in ("tensor", "statistics"):
        raise RunUtError(f"api_info {str(dump_path)!r}: task {dump.task!r}; run_ut replays 'tensor' and "
                         f"'statistics' dumps")
    source = TensorSource(tensor_dir(dump) if dump.task == "tensor" else None, seed, load_pt)
    return Replayer(source, device, seed, api_override, error_dir), dump


def _to_numpy(value: Any) -> np.ndarray:
    return widened(host_numpy(value)) if isinstance(value, torch.Tensor) else np.asarray(value)


def _dtype_name(value: Any) -> str:
    return str(value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__


def check_device(device: str) -> torch.device:
    """``cpu``, ``cuda[:N]`` or ``npu[:N]`` when available; anything else is a :class:`RunUtError`."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise RunUtError(f"-d {device!r} is not a device name (cpu, cuda:N, npu:N)") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count():
            raise RunUtError(f"-d {device}: no such CUDA device here")
        return dev
    if dev.type == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            raise RunUtError(f"-d {device}: torch_npu is not installed") from None
        return dev
    raise RunUtError(f"-d {device}: only cpu, cuda:N and npu:N are supported")


class Replayer:
    """Replays API entries against their bench (see :func:`run_ut`), its tensors from ``source``: a dump's
    files or generated values (:func:`replayer_for_dump`), or what an online record carries."""

    def __init__(self, source: Any, device: torch.device, seed: int,
                 api_override: Mapping[str, Callable[..., Any]] | None = None, error_dir: Path | None = None) -> None:
        self.source = source  # .tensor(value, rng) -> torch.Tensor
        self.device, self.seed = device, seed
        self.override = dict(api_override or {})
        self.error_dir = error_dir

    # --- one API --------------------------------------------------------------------------------------

    def check(self, entry_name: str, entry: dict, backward: dict | None) -> ApiRow:
        row_name = entry_name.removesuffix(".forward")
        rng = rng_for(self.seed, row_name)
        outcome = replay_entry(entry_name, entry, lambda values: [self.source.tensor(v, rng) for v in values],
                               lambda call: self._replay(row_name, call, backward, rng))
        if isinstance(outcome, Refused):
            return ApiRow(row_name, SKIP, NOT_APPLICABLE if backward is None else SKIP, outcome.reason,
                          input_error=outcome.input_error)
        return outcome

    def _replay(self, row_name: str, call: Call, backward: dict | None, rng: np.random.Generator) -> ApiRow:
        needs_grad = self._needs_grad(backward, call.values, call.base) \
            if backward is not None and not call.inplace else []
        dev = call.run(self.device, needs_grad=needs_grad, func=self.override.get(f"{call.prefix}.{call.api}"))
        ben = call.run(torch.device("cpu"), upcast=True, needs_grad=needs_grad)
        d_flat, b_flat = dev.flat, ben.flat
        if len(d_flat) != len(b_flat):
            return ApiRow(row_name, ERROR, SKIP if backward else NOT_APPLICABLE,
                          f"device gave {len(d_flat)} outputs, bench {len(b_flat)}")
        forward = [self._judge(f"{row_name}.forward.output.{i}", d, b) for i, (d, b) in enumerate(zip(d_flat, b_flat))]
        replayed = None if backward is None else self._backward(row_name, backward, rng, dev, ben)
        row = api_row(row_name, forward, replayed)
        if self.error_dir is not None and ERROR in (row.forward, row.backward):
            self._save(row_name, call.base, dev, ben)
        return row

    def _needs_grad(self, backward: dict, values: list[dict], base: list[torch.Tensor]) -> list[bool]:
        recorded = backward.get("output")
        if isinstance(recorded, list) and len(recorded) == len(values):
            flags = [v is not None for v in recorded]
        else:
            flags = [bool(v.get("requires_grad")) for v in values]
        return [f and (t.is_floating_point() or t.is_complex()) for f, t in zip(flags, base)]

    def _judge(self, name: str, d: Any, b: Any, computed_in: torch.dtype | None = None,
               gradient_scale: float | None = None) -> OutputRow:
        dn, bn = _to_numpy(d), _to_numpy(b)
        dtype = str(computed_in) if computed_in is not None and isinstance(d, torch.Tensor) and \
            d.is_floating_point() else _dtype_name(d)
        verdict = judge_output(name, dtype, dn, bn, gradient_scale=gradient_scale)
        return output_row(name, _dtype_name(b), dtype, dn, bn, verdict)

    def _backward(self, row_name: str, backward: dict, rng: np.random.Generator, dev: Side,
                  ben: Side) -> tuple[str, list[OutputRow], str]:
        if not any(dev.needs_grad):
            return SKIP, [], "no input needs a gradient (or in-place API)"
        grads_v = backward.get("input")
        d_outs = [t for t in dev.flat if isinstance(t, torch.Tensor)]
        b_outs = [t for t in ben.flat if isinstance(t, torch.Tensor)]
        if not isinstance(grads_v, list) or len(grads_v) != len(d_outs):
            return SKIP, [], "recorded output gradients do not match the outputs"
        d_pairs, b_pairs = [], []
        for value, d, b in zip(grads_v, d_outs, b_outs):
            if value is None or not is_tensor_value(value) or d.grad_fn is None or b.grad_fn is None:
                continue
            grad = self.source.tensor(value, rng)
            if grad.shape != d.shape and grad.numel() == d.numel():
                grad = grad.reshape(d.shape)  # a scalar output's gradient is recorded with shape [1]
            # both sides start from the gradient as the device output's dtype holds it (the bench upcasts
            # that), as they do from the inputs
            grad = grad.to(dtype=d.dtype)
            d_pairs.append((d, grad.to(self.device)))
            b_pairs.append((b, grad.to("cpu", b.dtype)))
        if not d_pairs:
            return SKIP, [], "no output gradient to replay"
        d_grads = _grads(d_pairs, dev.leaves)
        b_grads = _grads(b_pairs, ben.leaves)
        dev.grads, ben.grads = d_grads, b_grads
        scale = max(float(torch.linalg.vector_norm(grad.abs().double())) for _, grad in b_pairs)
        rows = []
        for k, (needed, dg, bg) in enumerate(zip(dev.needs_grad, d_grads, b_grads)):
            if not needed or (dg is None and bg is None):
                continue
            # under autocast the gradient was computed in the autocast dtype (then cast to the input's)
            rows.append(self._judge(f"{row_name}.backward.output.{k}", dg, bg, dev.autocast, scale))
        status = api_status([r.verdict for r in rows])
        return status, rows, "" if rows else "no input gradient computed"

    def _save(self, row_name: str, base: list, dev: Side, ben: Side) -> None:
        assert self.error_dir is not None
        folder = self.error_dir / row_name
        folder.mkdir(parents=True, exist_ok=True)
        groups = {"input": base, "device_output": dev.flat, "bench_output": ben.flat,
                  "device_input_grad": dev.grads, "bench_input_grad": ben.grads}
        for label, items in groups.items():
            for i, item in enumerate(items):
                if isinstance(item, torch.Tensor):
                    torch.save(item.detach().cpu().clone(), folder / f"{label}.{i}.pt")


def _grads(pairs: list[tuple[torch.Tensor, torch.Tensor]], leaves: list[torch.Tensor | None]) -> list:
    wanted = [t for t in leaves if t is not None]
    if not wanted:
        return [None] * len(leaves)
    found = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
    it = iter(found)
    return [next(it) if t is not None else None for t in leaves]


def known_list_names() -> frozenset[str]:
    """Every name a white/black list may hold: ``api``, ``Prefix.api`` and the bare API (``linear``)."""
    return list_names(api_table(), base_api)


def load_run_ut_section(config_path: str | os.PathLike | None) -> RunUtSection:
    """The ``run_ut`` section of a config.json, its lists checked against torch's API table
    (:func:`msprobe.core.run_ut.lists.read_run_ut_section`)."""
    return read_run_ut_section(config_path, "pytorch", known_list_names)


def run_ut(api_info: str | os.PathLike, output_dir: str | os.PathLike = ".", *, device: str = "cpu",
           save_error_data: bool = False, csv_path: str | os.PathLike | None = None,
           filter_duplicates: bool = False, white_list: tuple[str, ...] = (), black_list: tuple[str, ...] = (),
           seed: int = DEFAULT_SEED, api_override: Mapping[str, Callable[..., Any]] | None = None,
           apis: Collection[str] | None = None, error_data_path: str | os.PathLike | None = None) -> RunUtResult:
    """Replay every forward API of ``api_info`` (a dump.json) and write the result, details and summary
    files into ``output_dir`` (or, resuming, next to ``csv_path``).

    ``api_override`` maps ``Prefix.api`` (``Functional.gelu``) to a callable run on the device side in
    place of the API: a testing and debugging hook (e.g. to check that a wrong kernel is caught); the
    bench always runs the real API. ``apis``: check only these rows (``Functional.linear.0``) of the
    selection (``multi_run_ut`` gives each part its own). ``error_data_path``: where ``save_error_data``
    writes (default ``<output_dir>/error_data``, see :func:`error_data_dir`). Raises :class:`RunUtError`
    for unusable inputs.
    """
    dev = check_device(device)
    out = report_dir(output_dir, csv_path)
    error_dir = error_data_dir(out, error_data_path) if save_error_data else None
    replayer, dump = replayer_for_dump(api_info, dev, seed, api_override, error_dir)
    tensor_mode = dump.task == "tensor"
    report = Report(out, csv_path)
    checked = check_apis(replayer, dump.entries, report, white_list=white_list, black_list=black_list,
                         filter_duplicates=filter_duplicates, apis=apis)
    summary = report.summary(api_info=str(api_info), task=dump.task, device=str(dev),
                             bench="cpu, float16/bfloat16 -> float32, float32 -> float64",
                             seed=seed if not tensor_mode else None,
                             inputs="dump tensors" if tensor_mode else "generated from statistics",
                             white_list=list(white_list), black_list=list(black_list),
                             filter_duplicates=filter_duplicates, checked=checked)
    return RunUtResult(summary, checked, report.rows)
