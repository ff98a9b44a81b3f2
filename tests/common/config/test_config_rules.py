"""Per-key value checks and cross-field rules of each task section (msprobe.core.config)."""

from __future__ import annotations

import json

import pytest

from msprobe.core.config import ConfigError, load_config
from msprobe.core.tasks.dump import TensorConfig
from msprobe.core.tasks.grad_probe import GradProbeConfig
from msprobe.core.tasks.overflow_check import OverflowCheckConfig

API_A, API_B = "Tensor.add.0.forward", "Functional.square.2.backward"
MODULE_A, MODULE_B = "Module.conv1.Conv2d.forward.0", "Module.fc2.Linear.backward.1"


def _write(tmp_path, task: str, section: dict, common: dict) -> object:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": task, "dump_path": "./out", **common, task: section}))
    return path


# Each case: framework, task, section, extra common keys, expected {problem path: value given}.
INVALID = {
    # statistics / tensor: scope, list, data_mode, summary_mode, file_format
    "scope one name": ("pytorch", "statistics", {"scope": [API_A]}, {}, {"statistics.scope": [API_A]}),
    "scope three names": (
        "pytorch",
        "tensor",
        {"scope": [API_A, API_B, API_A]},
        {},
        {"tensor.scope": [API_A, API_B, API_A]},
    ),
    "scope not full names": (
        "pytorch",
        "statistics",
        {"scope": ["conv1", API_B]},
        {},
        {"statistics.scope[0]": "conv1"},
    ),
    "scope at L2": (
        "mindspore",
        "statistics",
        {"scope": [API_A, API_B]},
        {"level": "L2"},
        {"statistics.scope": [API_A, API_B]},
    ),
    "list not strings": (
        "pytorch",
        "statistics",
        {"list": ["relu", 3, ""]},
        {},
        {"statistics.list[1]": 3, "statistics.list[2]": ""},
    ),
    "list not a list": ("pytorch", "statistics", {"list": "relu"}, {}, {"statistics.list": "relu"}),
    "data_mode all combined": (
        "pytorch",
        "statistics",
        {"data_mode": ["all", "input"]},
        {},
        {"statistics.data_mode": ["all", "input"]},
    ),
    "data_mode unknown": (
        "pytorch",
        "statistics",
        {"data_mode": ["forward", "sideways"]},
        {},
        {"statistics.data_mode[1]": "sideways"},
    ),
    "data_mode empty": ("pytorch", "tensor", {"data_mode": []}, {}, {"tensor.data_mode": []}),
    "data_mode a string": ("pytorch", "tensor", {"data_mode": "all"}, {}, {"tensor.data_mode": "all"}),
    "static graph data_mode combined": (
        "mindspore",
        "tensor",
        {"data_mode": ["input", "output"]},
        {"level": "L2"},
        {"tensor.data_mode": ["input", "output"]},
    ),
    "static graph data_mode forward": (
        "mindspore",
        "statistics",
        {"data_mode": ["forward"]},
        {"level": "L2"},
        {"statistics.data_mode": ["forward"]},
    ),
    "static graph md5": (
        "mindspore",
        "statistics",
        {"summary_mode": "md5"},
        {"level": "L2"},
        {"statistics.summary_mode": "md5"},
    ),
    "static graph xor": (
        "mindspore",
        "statistics",
        {"summary_mode": "xor"},
        {"level": "L2"},
        {"statistics.summary_mode": "xor"},
    ),
    "bin outside static graph": (
        "pytorch",
        "tensor",
        {"file_format": "bin"},
        {},
        {"tensor.file_format": "bin"},
    ),
    "bin in pynative": (
        "mindspore",
        "tensor",
        {"file_format": "bin"},
        {"level": "L1"},
        {"tensor.file_format": "bin"},
    ),
    "pytorch L2 without list": ("pytorch", "tensor", {}, {"level": "L2"}, {"tensor.list": []}),
    "pytorch L2 api kind": (
        "pytorch",
        "statistics",
        {"list": ["relu"]},
        {"level": "L2"},
        {"statistics.list": ["relu"]},
    ),
    "pytorch L2 two apis": (
        "pytorch",
        "tensor",
        {"list": [API_A, API_B]},
        {"level": "L2"},
        {"tensor.list": [API_A, API_B]},
    ),
    "name-regex outside static graph": (
        "pytorch",
        "statistics",
        {"list": ["name-regex(Default/.+)"]},
        {},
        {"statistics.list[0]": "name-regex(Default/.+)"},
    ),
    "name-regex invalid": (
        "mindspore",
        "statistics",
        {"list": ["name-regex(Default/(.+)"]},
        {"level": "L2"},
        {"statistics.list[0]": "name-regex(Default/(.+)"},
    ),
    "online run_ut on mindspore": (
        "mindspore",
        "tensor",
        {"online_run_ut": True, "nfs_path": "/nfs"},
        {},
        {"tensor.online_run_ut": True},
    ),
    "online without receiver": (
        "pytorch",
        "tensor",
        {"online_run_ut": True},
        {},
        {"tensor.host": None, "tensor.port": None},
    ),
    "port as string": ("pytorch", "tensor", {"port": "8080"}, {}, {"tensor.port": "8080"}),
    "port zero": ("pytorch", "run_ut", {"port": 0}, {}, {"run_ut.port": 0}),
    # run_ut
    "run_ut online without receiver": (
        "pytorch",
        "run_ut",
        {"is_online": True, "host": "127.0.0.1"},
        {},
        {"run_ut.port": None},
    ),
    "run_ut rank_list": ("pytorch", "run_ut", {"rank_list": [0, -2]}, {}, {"run_ut.rank_list[1]": -2}),
    "run_ut error_data_path empty": (
        "pytorch",
        "run_ut",
        {"error_data_path": ""},
        {},
        {"run_ut.error_data_path": ""},
    ),
    "run_ut is_online string": ("pytorch", "run_ut", {"is_online": "true"}, {}, {"run_ut.is_online": "true"}),
    # overflow_check
    "overflow level L2 pytorch": ("pytorch", "overflow_check", {}, {"level": "L2"}, {"level": "L2"}),
    "overflow level mix": ("mindspore", "overflow_check", {}, {"level": "mix"}, {"level": "mix"}),
    "overflow_nums zero": (
        "pytorch",
        "overflow_check",
        {"overflow_nums": 0},
        {},
        {"overflow_check.overflow_nums": 0},
    ),
    "overflow_nums -2": (
        "pytorch",
        "overflow_check",
        {"overflow_nums": -2},
        {},
        {"overflow_check.overflow_nums": -2},
    ),
    "overflow_nums bool": (
        "pytorch",
        "overflow_check",
        {"overflow_nums": True},
        {},
        {"overflow_check.overflow_nums": True},
    ),
    "overflow_nums float": (
        "pytorch",
        "overflow_check",
        {"overflow_nums": 2.0},
        {},
        {"overflow_check.overflow_nums": 2.0},
    ),
    "check_mode unknown": (
        "mindspore",
        "overflow_check",
        {"check_mode": "vector"},
        {},
        {"overflow_check.check_mode": "vector"},
    ),
    # free_benchmark
    "backward with fix": (
        "pytorch",
        "free_benchmark",
        {"fuzz_stage": "backward", "handler_type": "fix"},
        {},
        {"free_benchmark.fuzz_stage": "backward"},
    ),
    "fix with preheat": (
        "pytorch",
        "free_benchmark",
        {"handler_type": "fix", "if_preheat": True},
        {},
        {"free_benchmark.if_preheat": True},
    ),
    "fix with add_noise": (
        "pytorch",
        "free_benchmark",
        {"handler_type": "fix", "pert_mode": "add_noise"},
        {},
        {"free_benchmark.pert_mode": "add_noise"},
    ),
    "cpu without to_cpu": (
        "pytorch",
        "free_benchmark",
        {"fuzz_device": "cpu"},
        {},
        {"free_benchmark.pert_mode": "improve_precision"},
    ),
    "to_cpu without cpu": (
        "pytorch",
        "free_benchmark",
        {"pert_mode": "to_cpu"},
        {},
        {"free_benchmark.fuzz_device": "npu"},
    ),
    "scope and list": (
        "pytorch",
        "free_benchmark",
        {"scope": ["Torch.matmul.0.forward"], "list": ["relu"]},
        {},
        {"free_benchmark.list": ["relu"]},
    ),
    "mindspore pytorch-only settings": (
        "mindspore",
        "free_benchmark",
        {
            "scope": ["Torch.matmul.0.forward"],
            "fuzz_device": "cpu",
            "pert_mode": "to_cpu",
            "if_preheat": True,
        },
        {},
        {
            "free_benchmark.scope": ["Torch.matmul.0.forward"],
            "free_benchmark.fuzz_device": "cpu",
            "free_benchmark.pert_mode": "to_cpu",
            "free_benchmark.if_preheat": True,
        },
    ),
    "preheat_step zero": (
        "pytorch",
        "free_benchmark",
        {"preheat_step": 0},
        {},
        {"free_benchmark.preheat_step": 0},
    ),
    "max_sample float": (
        "pytorch",
        "free_benchmark",
        {"max_sample": 5.5},
        {},
        {"free_benchmark.max_sample": 5.5},
    ),
    "if_preheat string": (
        "pytorch",
        "free_benchmark",
        {"if_preheat": "true"},
        {},
        {"free_benchmark.if_preheat": "true"},
    ),
    "fuzz_level L2": (
        "pytorch",
        "free_benchmark",
        {"fuzz_level": "L2"},
        {},
        {"free_benchmark.fuzz_level": "L2"},
    ),
    # a bad pert_mode is reported once, not again by the fuzz_device rule
    "pert_mode unknown": (
        "pytorch",
        "free_benchmark",
        {"pert_mode": "shuffle", "fuzz_device": "cpu"},
        {},
        {"free_benchmark.pert_mode": "shuffle"},
    ),
    # grad_probe
    "grad_level L3": ("pytorch", "grad_probe", {"grad_level": "L3"}, {}, {"grad_probe.grad_level": "L3"}),
    "bounds not increasing": (
        "pytorch",
        "grad_probe",
        {"bounds": [-1, 0, 0]},
        {},
        {"grad_probe.bounds[2]": 0},
    ),
    "bounds not numbers": (
        "mindspore",
        "grad_probe",
        {"bounds": [-1, "0", True]},
        {},
        {"grad_probe.bounds[1]": "0", "grad_probe.bounds[2]": True},
    ),
    "bounds outside int64": (
        "pytorch",
        "grad_probe",
        {"bounds": [0, 2**63]},
        {},
        {"grad_probe.bounds[1]": 2**63},
    ),
    "bounds empty": ("pytorch", "grad_probe", {"bounds": []}, {}, {"grad_probe.bounds": []}),
    "param_list not strings": (
        "pytorch",
        "grad_probe",
        {"param_list": ["fc.weight", 7]},
        {},
        {"grad_probe.param_list[1]": 7},
    ),
}


@pytest.mark.parametrize("case", list(INVALID), ids=list(INVALID))
def test_invalid_values_are_reported(tmp_path, case):
    framework, task, section, common, expected = INVALID[case]
    with pytest.raises(ConfigError) as excinfo:
        load_config(_write(tmp_path, task, section, common), framework=framework)
    assert {problem.path: problem.value for problem in excinfo.value.problems} == expected


VALID = {
    "api scope": ("pytorch", "statistics", {"scope": [API_A, API_B]}, {}),
    "module scope at L0": ("pytorch", "tensor", {"scope": [MODULE_A, MODULE_B]}, {"level": "L0"}),
    "cell scope in mix": (
        "mindspore",
        "statistics",
        {"scope": ["Cell.conv1.Conv2d.forward.0", API_A]},
        {"level": "mix"},
    ),
    "data_mode combined": ("pytorch", "statistics", {"data_mode": ["forward", "input"]}, {}),
    "static graph": (
        "mindspore",
        "tensor",
        {"list": ["name-regex(Default/.+)", "Conv2D"], "data_mode": ["output"], "file_format": "bin"},
        {"level": "L2"},
    ),
    "pytorch kernel dump": ("pytorch", "statistics", {"list": [API_B]}, {"level": "L2"}),
    "overflow L0": ("pytorch", "overflow_check", {"overflow_nums": -1}, {"level": "L0"}),
    "overflow static graph": ("mindspore", "overflow_check", {"check_mode": "atomic"}, {"level": "L2"}),
    "cpu benchmark": (
        "pytorch",
        "free_benchmark",
        {"fuzz_device": "cpu", "pert_mode": "to_cpu", "handler_type": "fix"},
        {},
    ),
    "preheat": (
        "pytorch",
        "free_benchmark",
        {"if_preheat": True, "preheat_step": 3, "max_sample": 1, "scope": ["Torch.matmul.0.forward"]},
        {},
    ),
    "backward check": (
        "mindspore",
        "free_benchmark",
        {"fuzz_stage": "backward", "pert_mode": "bit_noise"},
        {},
    ),
    "online over nfs": ("pytorch", "tensor", {"online_run_ut": True, "nfs_path": "/nfs/x"}, {}),
    "online over tcp": ("pytorch", "run_ut", {"is_online": True, "host": "10.0.0.2", "port": 65535}, {}),
    "grad bounds": (
        "mindspore",
        "grad_probe",
        {"grad_level": "L2", "bounds": [-10, -0.5, 3], "param_list": ["w"]},
        {},
    ),
}


@pytest.mark.parametrize("case", list(VALID), ids=list(VALID))
def test_valid_combinations_load(tmp_path, case):
    framework, task, section, common = VALID[case]
    config = load_config(_write(tmp_path, task, section, common), framework=framework)
    for key, value in section.items():
        loaded = getattr(config.section, "api_list" if key == "list" else key)
        assert loaded == (tuple(value) if isinstance(value, list) else value), key


def test_bounds_become_floats(tmp_path):
    config = load_config(_write(tmp_path, "grad_probe", {"bounds": [-10, -0.5, 3]}, {}), framework="pytorch")
    assert config.section_as(GradProbeConfig).bounds == (-10.0, -0.5, 3.0)
    assert all(type(bound) is float for bound in config.section_as(GradProbeConfig).bounds)


def test_check_mode_on_pytorch_only_warns(tmp_path, msprobe_log):
    config = load_config(
        _write(tmp_path, "overflow_check", {"check_mode": "aicore"}, {}), framework="pytorch"
    )
    assert config.section_as(OverflowCheckConfig).check_mode == "aicore"
    assert "'aicore' applies to MindSpore only; ignored on PyTorch" in msprobe_log.text()


def test_data_mode_duplicates_collapse(tmp_path):
    config = load_config(
        _write(tmp_path, "tensor", {"data_mode": ["input", "forward", "input"]}, {}), framework="pytorch"
    )
    assert config.section_as(TensorConfig).data_mode == ("input", "forward")


def test_level_argument_is_named_in_cross_field_problem(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_config(_write(tmp_path, "overflow_check", {}, {}), framework="pytorch", level="L2")
    assert [problem.path for problem in excinfo.value.problems] == ["level (argument)"]
    assert "one of 'L0', 'L1' for task overflow_check for PyTorch" in str(excinfo.value)
