"""The training-state monitor's configuration file: every key read and checked before training runs.

Keys carry upstream TrainerMon's names where the meaning is the same (docs/monitor.md has the table).
Every problem in a file is reported at once through the config room's :class:`ConfigError`, one line
per key: its name, the value given and what is allowed. Upstream keys this monitor does not implement
are accepted while they are off (``false``, empty) so that an upstream file loads, and reported when
they ask for the feature.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from msprobe.core.config.errors import ConfigError, Problem
from msprobe.core.config.fields import FieldReader, is_int
from msprobe.core.monitor.ops import OPS, WRITTEN_ALWAYS
from msprobe.core.services.jsonfile import JsonFileError, load_json_file

FORMATS = ("csv", "sqlite", "tensorboard")
RULES = ("AnomalyTurbulence", "AnomalyNan")
NEVER = 10**18  # collect_times when not given: collect for the whole run
MAX_CONFIG_BYTES = 1 << 20

# Upstream keys whose feature is not built here: allowed when off, reported when on.
UNSUPPORTED_WHEN_ON = (
    "ur_distribution", "mg_direction", "recording_l2_features", "monitor_mbs_grad", "print_struct",
    "stack_info", "all_xy", "squash_name", "append_output",
)
KNOWN = (
    "targets", "xy_distribution", "forward_only", "backward_only", "wg_distribution", "mv_distribution",
    "param_distribution", "cc_distribution", "moe_distribution", "ops", "eps", "ndigits", "start_step", "step_interval",
    "collect_times", "format", "alert", "dynamic_on", "module_ranks", "step_count_per_record", *UNSUPPORTED_WHEN_ON,
)
CC_KEYS = ("enable", "cc_codeline", "cc_pre_hook", "cc_log_only")


@dataclass(frozen=True)
class AlertRule:
    """``AnomalyTurbulence``: |value| beyond (1 + threshold) × the mean of its last ``window`` values (upstream's
    rule, with a window); ``AnomalyNan``: a NaN or infinite value (or, with a threshold, |value| above it)."""

    name: str
    threshold: float | None
    ops: tuple[str, ...]
    window: int = 10
    min_history: int = 3


DEFAULT_RULES = (
    AlertRule("AnomalyTurbulence", 9.0, ("norm",)),  # a norm beyond 10× its moving mean
    AlertRule("AnomalyNan", None, ("norm",)),  # the norm is NaN/inf exactly when a value is
)


@dataclass(frozen=True)
class CcConfig:
    """``cc_distribution``: statistics of the tensors passed to torch.distributed's collectives. ``codeline``:
    regular expressions, a call is measured only when its call stack matches one (empty: every call);
    ``pre_hook``: the inputs before the collective too; ``log_only``: only the call stacks, no statistics."""

    enable: bool = False
    codeline: tuple[str, ...] = ()
    pre_hook: bool = False
    log_only: bool = False


@dataclass(frozen=True)
class MonitorConfig:
    """A checked configuration; ``targets`` empty means every module."""

    targets: tuple[str, ...] = ()
    xy_distribution: bool = False
    forward_only: bool = False
    backward_only: bool = False
    wg_distribution: bool = False
    mv_distribution: bool = False
    param_distribution: bool = False
    cc_distribution: CcConfig = CcConfig()
    moe_distribution: bool = False
    ops: tuple[str, ...] = ("norm",)  # upstream's default op too
    eps: float = 1e-8
    ndigits: int = 6
    start_step: int = 0
    step_interval: int = 1
    collect_times: int = NEVER
    formats: tuple[str, ...] = ("csv",)
    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    alert_dump: bool = False
    dynamic_on: bool | None = None  # None: not stated
    module_ranks: tuple[int, ...] = ()
    step_count_per_record: int = 100  # upstream: 1, a file per group and step
    file: str | None = field(default=None, compare=False)

    @property
    def any_metric(self) -> bool:
        return (self.xy_distribution or self.wg_distribution or self.mv_distribution or self.param_distribution
                or self.moe_distribution or self.cc_distribution.enable)

    def collects(self, step: int, collected: int) -> bool:
        """Whether ``step`` is monitored, ``collected`` monitored steps having been taken already."""
        return step >= self.start_step and (step - self.start_step) % self.step_interval == 0 and (
            collected < self.collect_times
        )


def check_set_monitor_arguments(grad_acc_steps: object, start_iteration: object) -> None:
    """``set_monitor``'s numbers, checked before any hook goes on (both frameworks)."""
    problems = []
    if not isinstance(grad_acc_steps, int) or isinstance(grad_acc_steps, bool) or grad_acc_steps < 1:
        problems.append(Problem("set_monitor.grad_acc_steps", grad_acc_steps, "an integer >= 1"))
    if not isinstance(start_iteration, int) or isinstance(start_iteration, bool) or start_iteration < 0:
        problems.append(Problem("set_monitor.start_iteration", start_iteration, "an integer >= 0"))
    if problems:
        raise ConfigError(problems)


def load_monitor_config(path: str | os.PathLike) -> MonitorConfig:
    """Read and check the file at ``path``; :class:`ConfigError` lists every problem."""
    try:
        raw = load_json_file(path, MAX_CONFIG_BYTES)
    except JsonFileError as error:
        raise ConfigError(file=os.fspath(path), detail=error.detail) from None
    return parse_monitor_config(raw, file=os.fspath(path))


def parse_monitor_config(raw: object, file: str | None = None) -> MonitorConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(file=file, detail=f"must hold a JSON object, not {type(raw).__name__}")
    reader = FieldReader(raw)
    for key in raw:
        if key not in KNOWN:
            reader.report(key, raw[key], "a monitor key: " + ", ".join(KNOWN))
    for key in UNSUPPORTED_WHEN_ON:
        if raw.get(key) not in (None, False, [], {}, ""):
            reader.report(key, raw[key], "false or absent (upstream-only feature, not built in this msprobe)")
    flags = {key: reader.flag(key, False) for key in (
        "xy_distribution", "forward_only", "backward_only", "wg_distribution", "mv_distribution",
        "param_distribution", "moe_distribution")}
    if flags["forward_only"] and flags["backward_only"]:
        reader.report("backward_only", True, "false when forward_only is true (they exclude each other)")
    defaults = MonitorConfig()
    config = MonitorConfig(
        targets=_targets(reader),
        cc_distribution=_cc(reader),
        ops=_ops(reader),
        eps=_positive_number(reader, "eps", defaults.eps),
        ndigits=reader.integer("ndigits", 6, lambda v: 0 <= v <= 17, "an integer 0..17"),
        start_step=reader.integer("start_step", 0, lambda v: v >= 0, "an integer >= 0"),
        step_interval=reader.integer("step_interval", 1, lambda v: v >= 1, "an integer >= 1"),
        collect_times=reader.integer("collect_times", NEVER, lambda v: v >= 1, "an integer >= 1"),
        formats=_formats(reader),
        module_ranks=_ranks(reader),
        step_count_per_record=reader.integer("step_count_per_record", 100, lambda v: v >= 1, "an integer >= 1"),
        dynamic_on=reader.flag("dynamic_on", None),
        file=file,
        **_alert(reader),
        **flags,
    )
    if reader.problems:
        raise ConfigError(reader.problems, file=file)
    return config


def _targets(reader: FieldReader) -> tuple[str, ...]:
    allowed = "an object: module name -> what to watch ({} for every module)"
    return tuple(reader.checked("targets", {}, lambda v: isinstance(v, Mapping), allowed))


def _cc(reader: FieldReader) -> CcConfig:
    value = reader.raw.get("cc_distribution")
    if value is None:
        return CcConfig()
    if not isinstance(value, Mapping):
        reader.report("cc_distribution", value, 'an object such as {"enable": false}')
        return CcConfig()
    sub = FieldReader(value, prefix="cc_distribution.")
    for key in value:
        if key not in CC_KEYS:
            sub.report(key, value[key], "one of " + ", ".join(CC_KEYS))
    codeline = sub.names("cc_codeline")
    for index, pattern in enumerate(codeline):
        try:
            re.compile(pattern)
        except re.error as error:
            sub.report("cc_codeline", pattern, f"a regular expression ({error})", index)
    config = CcConfig(sub.flag("enable", False), codeline, sub.flag("cc_pre_hook", False),
                      sub.flag("cc_log_only", False))
    reader.problems.extend(sub.problems)
    return config


def _ops(reader: FieldReader) -> tuple[str, ...]:
    value = reader.raw.get("ops")
    if value is None:
        return MonitorConfig().ops
    allowed = tuple(OPS) + WRITTEN_ALWAYS
    if not isinstance(value, list) or not value:
        reader.report("ops", value, "a non-empty list of " + ", ".join(allowed))
        return MonitorConfig().ops
    for index, op in enumerate(value):
        if op not in allowed:
            reader.report("ops", op, "one of " + ", ".join(allowed), index)
    ops = tuple(dict.fromkeys(op for op in value if op in OPS))
    if not ops and "ops" not in reader.invalid:
        reader.report("ops", value, "at least one of " + ", ".join(OPS))
    return ops or MonitorConfig().ops


def _positive_number(reader: FieldReader, key: str, default: float) -> float:
    def accept(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0

    return float(reader.checked(key, default, accept, "a finite number > 0"))


def _formats(reader: FieldReader) -> tuple[str, ...]:
    value = reader.raw.get("format")
    if value is None:
        return ("csv",)
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v in FORMATS for v in values):
        reader.report("format", value, "one of " + ", ".join(FORMATS) + ", or a non-empty list of them")
        return ("csv",)
    return tuple(dict.fromkeys(values))


def _ranks(reader: FieldReader) -> tuple[int, ...]:
    def accept(value: object) -> bool:
        return isinstance(value, list) and all(is_int(v) and v >= 0 for v in value)

    return tuple(reader.checked("module_ranks", [], accept, "a list of ranks (integers >= 0); empty: every rank"))


def _alert(reader: FieldReader) -> dict:
    value = reader.raw.get("alert")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        reader.report("alert", value, 'an object such as {"rules": [...], "dump": false}')
        return {}
    sub = FieldReader(value, prefix="alert.")
    for key in value:
        if key not in ("rules", "dump"):
            sub.report(key, value[key], "one of 'rules', 'dump'")
    dump = sub.flag("dump", False)
    rules = value.get("rules")
    parsed: tuple[AlertRule, ...] = DEFAULT_RULES
    if rules is not None:
        if not isinstance(rules, list):
            sub.report("rules", rules, "a list of {rule_name, args} objects")
        else:
            parsed = tuple(rule for index, spec in enumerate(rules) if (rule := _rule(sub, index, spec)))
    reader.problems.extend(sub.problems)
    return {"rules": parsed, "alert_dump": dump}


def _rule(reader: FieldReader, index: int, spec: object) -> AlertRule | None:
    path = f"rules[{index}]"
    if not isinstance(spec, Mapping) or spec.get("rule_name") not in RULES:
        shown = spec.get("rule_name") if isinstance(spec, Mapping) else spec
        reader.report(f"{path}.rule_name", shown, "one of " + ", ".join(RULES))
        return None
    args = spec.get("args") or {}
    sub = FieldReader(args if isinstance(args, Mapping) else {}, prefix=f"{reader.prefix}{path}.args.")
    if not isinstance(args, Mapping):
        reader.report(f"{path}.args", args, "an object such as {\"threshold\": 0.5}")
    for key in args if isinstance(args, Mapping) else ():
        if key not in ("threshold", "ops", "window"):
            sub.report(key, args[key], "one of 'threshold', 'ops', 'window'")
    name = spec["rule_name"]
    default_threshold = 9.0 if name == "AnomalyTurbulence" else None
    threshold = _positive_number(sub, "threshold", default_threshold) if sub.given("threshold") else default_threshold
    ops = sub.names("ops")
    for position, op in enumerate(ops):
        if op not in OPS:
            sub.report("ops", op, "one of " + ", ".join(OPS), position)
    window = sub.integer("window", 10, lambda v: v >= 1, "an integer >= 1")
    reader.problems.extend(sub.problems)
    return AlertRule(name, threshold, tuple(ops) or ("norm",), window)


__all__ = ["ConfigError", "CcConfig", "MonitorConfig", "AlertRule", "Problem", "load_monitor_config",
           "parse_monitor_config"]
