"""One parser per task section: per-key types and allowed values (cross-field rules live in rules.py).

Every key and default follows the msprobe 1.1.1 reference; the JSON key ``list`` becomes the
attribute ``api_list`` because ``list`` shadows a builtin.
"""

from __future__ import annotations

from collections.abc import Callable

from msprobe.core.config.fields import FieldReader, one_of
from msprobe.core.config.model import (
    DATA_MODES,
    FreeBenchmarkConfig,
    GradProbeConfig,
    OverflowCheckConfig,
    RunUtConfig,
    SectionConfig,
    StatisticsConfig,
    TensorConfig,
)

SUMMARY_MODES = ("statistics", "md5")
FILE_FORMATS = ("npy", "bin")
CHECK_MODES = ("all", "aicore", "atomic")
FUZZ_DEVICES = ("npu", "cpu")
PERT_MODES = ("improve_precision", "add_noise", "no_change", "bit_noise", "change_value", "to_cpu")
HANDLER_TYPES = ("check", "fix")
FUZZ_LEVELS = ("L1",)
FUZZ_STAGES = ("forward", "backward")
GRAD_LEVELS = ("L0", "L1", "L2")


def _data_mode(reader: FieldReader) -> tuple[str, ...]:
    value = reader.raw.get("data_mode")
    if value is None:
        return StatisticsConfig.data_mode
    if not isinstance(value, list) or not value:
        reader.report("data_mode", value, f'a non-empty list of {one_of(DATA_MODES)} ("all" alone)')
        return StatisticsConfig.data_mode
    for index, mode in enumerate(value):
        if mode not in DATA_MODES:
            reader.report("data_mode", mode, one_of(DATA_MODES), index)
    if "all" in value and len(value) > 1:
        reader.report(
            "data_mode", value, '["all"] alone, or any combination of the other modes without "all"'
        )
    if "data_mode" in reader.invalid:
        return StatisticsConfig.data_mode
    return tuple(dict.fromkeys(value))


def parse_statistics(reader: FieldReader) -> StatisticsConfig:
    return StatisticsConfig(
        scope=reader.names("scope"),
        api_list=reader.names("list"),
        data_mode=_data_mode(reader),
        summary_mode=reader.choice("summary_mode", SUMMARY_MODES, StatisticsConfig.summary_mode),
    )


def parse_tensor(reader: FieldReader) -> TensorConfig:
    return TensorConfig(
        scope=reader.names("scope"),
        api_list=reader.names("list"),
        data_mode=_data_mode(reader),
        file_format=reader.choice("file_format", FILE_FORMATS, TensorConfig.file_format),
        online_run_ut=reader.flag("online_run_ut", False),
        nfs_path=reader.optional_text("nfs_path"),
        host=reader.optional_text("host"),
        port=reader.port("port"),
        tls_path=reader.text("tls_path", TensorConfig.tls_path),
        online_run_ut_recompute=reader.flag("online_run_ut_recompute", False),
    )


def parse_run_ut(reader: FieldReader) -> RunUtConfig:
    return RunUtConfig(
        white_list=reader.names("white_list"),
        black_list=reader.names("black_list"),
        error_data_path=reader.text("error_data_path", RunUtConfig.error_data_path, non_empty=True),
        is_online=reader.flag("is_online", False),
        nfs_path=reader.optional_text("nfs_path"),
        host=reader.optional_text("host"),
        port=reader.port("port"),
        rank_list=reader.indices("rank_list", RunUtConfig.rank_list),
        tls_path=reader.text("tls_path", RunUtConfig.tls_path),
    )


def parse_overflow_check(reader: FieldReader) -> OverflowCheckConfig:
    return OverflowCheckConfig(
        overflow_nums=reader.integer(
            "overflow_nums", 1, lambda n: n >= 1 or n == -1, "an integer >= 1, or -1 (never stop)"
        ),
        check_mode=reader.choice("check_mode", CHECK_MODES, OverflowCheckConfig.check_mode),
    )


def _positive(reader: FieldReader, key: str, default: int) -> int:
    return reader.integer(key, default, lambda n: n > 0, "an integer > 0")


def parse_free_benchmark(reader: FieldReader) -> FreeBenchmarkConfig:
    defaults = FreeBenchmarkConfig()
    return FreeBenchmarkConfig(
        scope=reader.names("scope"),
        api_list=reader.names("list"),
        fuzz_device=reader.choice("fuzz_device", FUZZ_DEVICES, defaults.fuzz_device),
        pert_mode=reader.choice("pert_mode", PERT_MODES, defaults.pert_mode),
        handler_type=reader.choice("handler_type", HANDLER_TYPES, defaults.handler_type),
        fuzz_level=reader.choice("fuzz_level", FUZZ_LEVELS, defaults.fuzz_level),
        fuzz_stage=reader.choice("fuzz_stage", FUZZ_STAGES, defaults.fuzz_stage),
        if_preheat=reader.flag("if_preheat", defaults.if_preheat),
        preheat_step=_positive(reader, "preheat_step", defaults.preheat_step),
        max_sample=_positive(reader, "max_sample", defaults.max_sample),
    )


def parse_grad_probe(reader: FieldReader) -> GradProbeConfig:
    return GradProbeConfig(
        grad_level=reader.choice("grad_level", GRAD_LEVELS, GradProbeConfig.grad_level),
        param_list=reader.names("param_list"),
        bounds=reader.increasing_numbers("bounds", GradProbeConfig.bounds),
    )


SECTION_PARSERS: dict[str, Callable[[FieldReader], SectionConfig]] = {
    "statistics": parse_statistics,
    "tensor": parse_tensor,
    "run_ut": parse_run_ut,
    "overflow_check": parse_overflow_check,
    "free_benchmark": parse_free_benchmark,
    "grad_probe": parse_grad_probe,
}
