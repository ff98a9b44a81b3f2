"""Level L2 of the dump tasks on PyTorch: the one API of ``list``, at kernel or operator level.

- On an Ascend NPU (torch_npu imports and an NPU is available): torch_npu's kernel dump, through the
  three calls of :class:`KernelDumpBackend` (``init_dump``, ``set_dump``, ``finalize_dump``). Each
  selected step gets ``{dump_path}/step{N}/kernel_config_{device}.json``; the dump itself writes
  ``step{N}/{timestamp}/{device}/...`` while the listed API runs.
- Everywhere else: an aten-level dump of the listed API (``hooks/aten.py``) in the usual dump.json,
  stack.json and construct.json of ``step{N}/rank{R}``, every ``Aten`` entry's parent the API's entry.

Both run the L1 interceptor restricted to the listed API, so the API's count is the one an L1 dump
gives it. docs/pytorch/kernel_dump.md describes both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from msprobe.core.config import DebuggerConfig
from msprobe.core.dump.collector import CallState, DumpCollector
from msprobe.core.contract import Call, CallSink
from msprobe.core.services.fileio import atomic_write_text, make_dir
from msprobe.core.services.log import logger
from msprobe.core.lifecycle.select import Selector
from msprobe.core.lifecycle.session import Session
from msprobe.pytorch.hooks.aten import ATEN, AtenCapture, ListedApiInterceptor

DUMPED = "The kernel data of {api_name} is dumped successfully."
UNSUPPORTED = "The kernel dump does not support the {api_name} API."
_ACL_DUMP_MODES = {("input",): "input", ("output",): "output"}


# ---------------------------------------------------------------------------------- off the NPU
class AtenDumpCollector(DumpCollector):
    """The dump collector at L2: the listed API's entry as usual; ``Aten`` entries of either direction
    are recorded as calls (inputs before, outputs after), with the listed API's entry as their parent in
    construct.json."""

    def __init__(self, *, listed: str, **parts: Any) -> None:
        super().__init__(**parts)
        self.listed = listed
        self.parts.output.with_construct = True  # construct.json shows the nesting under the API
        self._aten: CallState[dict] = CallState("aten entry")

    def forward_start(self, call: Call) -> bool:
        if not call.name.startswith(f"{ATEN}."):
            return super().forward_start(call)
        parts, selector = self.parts, self.selector
        entry: dict = {}
        if selector.wants(call.name, "input"):
            entry["input_args"] = parts.entries.encode(call.args, call.name, "input")
            entry["input_kwargs"] = parts.entries.encode(call.kwargs, call.name, "kwargs")
        if selector.wants(call.name):
            parts.output.add_stack(call.name)
        self._aten.put(call, entry)
        return False

    def forward_end(self, call: Call, output: Any) -> None:
        if not call.name.startswith(f"{ATEN}."):
            return super().forward_end(call, output)
        entry = self._aten.take(call)
        if entry is None or not self.selector.wants(call.name):
            return None
        if self.selector.wants(call.name, "output"):
            entry["output"] = self.parts.entries.encode(output, call.name, "output", as_list=True)
        self.parts.keep(call.name, entry, self.listed)
        return None


def aten_dump(config: DebuggerConfig, kit: Any, on_finish: Callable[[], None]) -> Session:
    """The aten-level dump of the listed API: a session with the dump collector and the L2 interceptor.

    The selector keeps step, rank and data_mode; ``list`` is applied by the interceptor, which reports
    only the listed API and the operators inside it."""
    section = config.section
    listed = section.api_list[0]
    selector = Selector(steps=config.step, ranks=config.rank, data_mode=section.data_mode)
    collector = AtenDumpCollector(
        listed=listed, task=config.task, summary_mode=getattr(section, "summary_mode", "statistics"),
        level=config.level, framework=config.framework, dump_path=config.dump_path, selector=selector,
        adapter=kit.adapter(),
    )
    return Session(config, collector, lambda sink: ListedApiInterceptor(sink, listed, AtenCapture(sink)),
                   kit.current_rank, on_finish, prepare_model=kit.prepare_for_comparison)


# ---------------------------------------------------------------------------------- on the NPU
class KernelDumpBackend(Protocol):
    """torch_npu's kernel dump, as msprobe uses it (``torch_npu.npu.init_dump`` and friends)."""

    def device_id(self) -> int:
        """The current NPU."""

    def init_dump(self) -> None: ...

    def set_dump(self, config_path: str) -> None:
        """Dump every kernel launched from now on as ``config_path`` (an ACL dump configuration) says."""

    def finalize_dump(self) -> None: ...


class TorchNpuBackend:
    """The real backend (an Ascend NPU with torch_npu)."""

    def __init__(self) -> None:
        import torch_npu  # noqa: F401  (registers torch.npu)

        self._npu = torch_npu.npu

    @staticmethod
    def available() -> bool:
        try:
            import torch
            import torch_npu  # noqa: F401
        except ImportError:
            return False
        npu = getattr(torch, "npu", None)
        return bool(npu is not None and npu.is_available())

    def device_id(self) -> int:
        return int(self._npu.current_device())

    def init_dump(self) -> None:
        self._npu.init_dump()

    def set_dump(self, config_path: str) -> None:
        self._npu.set_dump(config_path)

    def finalize_dump(self) -> None:
        self._npu.finalize_dump()


def kernel_config(dump_dir: Path, data_mode: tuple[str, ...]) -> dict:
    """The ACL dump configuration of one step: every kernel, into ``dump_dir``."""
    mode = _ACL_DUMP_MODES.get(tuple(m for m in data_mode if m in ("input", "output")), "all")
    return {"dump": {"dump_list": [], "dump_path": str(dump_dir), "dump_mode": mode, "dump_op_switch": "on"}}


class NpuKernelDump:
    """A step collector and capture window in one: each selected step writes its kernel_config file;
    the window turns torch_npu's kernel dump on and off around the listed API."""

    per_node = False  # the dump stays on from the first kernel of the API's backward to its last

    def __init__(self, config: DebuggerConfig, backend: KernelDumpBackend) -> None:
        self.selector = Selector(steps=config.step, ranks=config.rank)
        self.dump_path = Path(config.dump_path)
        self.data_mode = tuple(config.section.data_mode)
        self.backend = backend
        self.config_path: Path | None = None
        self._dumping = False
        self._initialised = False

    # StepCollector ----------------------------------------------------------------------------
    @property
    def exhausted(self) -> bool:
        return False

    def begin_step(self, step: int, rank: int | None) -> None:
        step_dir = make_dir(self.dump_path / f"step{step}")
        self.config_path = step_dir / f"kernel_config_{self.backend.device_id()}.json"
        atomic_write_text(self.config_path, json.dumps(kernel_config(step_dir, self.data_mode), indent=4))

    def end_step(self) -> None:
        self.close()

    # CallSink: the listed API's own entry is the kernel data; nothing else is written ---------
    def forward_start(self, call: Call) -> bool:
        return False

    def forward_end(self, call: Call, output: Any) -> None:
        return None

    def backward(self, call: Call, grad_input: tuple, grad_output: tuple) -> None:
        pass

    # CaptureWindow ----------------------------------------------------------------------------
    def open(self, api: str, direction: str) -> None:
        if self._dumping or self.config_path is None:
            return
        if not self._initialised:
            self.backend.init_dump()
            self._initialised = True
        self.backend.set_dump(str(self.config_path))
        self._dumping = True
        self._api = api

    def close(self) -> None:
        if self._dumping:
            self._dumping = False
            self.backend.finalize_dump()
            self._initialised = False
            logger.info(DUMPED.format(api_name=self._api))

    def close_all(self) -> None:
        self.close()

    def unsupported(self, api: str) -> None:
        logger.warning(UNSUPPORTED.format(api_name=api))


def npu_kernel_dump(config: DebuggerConfig, kit: Any, on_finish: Callable[[], None],
                    backend: KernelDumpBackend) -> Session:
    """torch_npu's kernel dump of the listed API, one per selected step."""
    listed = config.section.api_list[0]
    dump = NpuKernelDump(config, backend)

    def interceptor(sink: CallSink) -> ListedApiInterceptor:
        return ListedApiInterceptor(sink, listed, dump)

    return Session(config, dump, interceptor, kit.current_rank, on_finish)


def kernel_dump(config: DebuggerConfig, kit: Any, on_finish: Callable[[], None],
                backend: KernelDumpBackend | None = None) -> Session:
    """Level L2: the NPU kernel dump with ``backend`` (or torch_npu when an NPU is there), else the aten
    dump."""
    if backend is None and TorchNpuBackend.available():
        backend = TorchNpuBackend()
    if backend is not None:
        return npu_kernel_dump(config, kit, on_finish, backend)
    logger.info(f"level L2 without an Ascend NPU: {config.section.api_list[0]} is dumped at aten operator level")
    return aten_dump(config, kit, on_finish)
