"""Loading config.json: files, defaults, overrides, every check and warning (msprobe.core.config)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from msprobe.core.config import ConfigError, DebuggerConfig, load_config, load_debugger_config
from msprobe.core.tasks.dump import StatisticsConfig, TensorConfig
from msprobe.core.tasks.free_benchmark import FreeBenchmarkConfig

EXAMPLES = Path(__file__).parents[1] / "data" / "configs"


@pytest.fixture
def load(tmp_path):
    """Writes ``config`` (a dict, or raw text) to a real file and loads it."""

    def _load(
        config: dict | str, framework: str = "pytorch", loader=load_config, **overrides
    ) -> DebuggerConfig:
        path = tmp_path / "config.json"
        path.write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
        return loader(path, framework=framework, **overrides)

    return _load


def problems(excinfo: pytest.ExceptionInfo[ConfigError]) -> dict[str, object]:
    """path → value of every problem reported."""
    return {problem.path: problem.value for problem in excinfo.value.problems}


def base(task: str = "statistics", section: dict | None = None, **common) -> dict:
    config = {"task": task, "dump_path": "./out", **common}
    if section is not None:
        config[task] = section
    return config


# --- files -----------------------------------------------------------------------------------


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "nowhere" / "config.json"
    with pytest.raises(ConfigError) as excinfo:
        load_config(path, framework="pytorch")
    assert excinfo.value.file == str(path)
    assert str(path) in str(excinfo.value) and "does not exist" in str(excinfo.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, framework="pytorch")


def test_json_syntax_error_names_line_and_column(load, tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load('{\n  "task": "tensor",\n  "dump_path" "x"\n}')
    message = str(excinfo.value)
    assert str(tmp_path / "config.json") in message
    assert "line 3, column 15" in message and "Expecting ':' delimiter" in message


def test_top_level_must_be_an_object(load):
    with pytest.raises(ConfigError, match="JSON object .* not a list"):
        load("[1, 2]")


def test_non_utf8_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"task": "\xff"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path, framework="pytorch")


def test_framework_must_be_known():
    with pytest.raises(ValueError, match="framework: got 'jax'; allowed: one of 'pytorch', 'mindspore'"):
        load_config(framework="jax")


# --- defaults --------------------------------------------------------------------------------


def test_no_file_gives_builtin_defaults():
    config = load_config(framework="mindspore")
    assert config == DebuggerConfig(
        framework="mindspore",
        task="statistics",
        dump_path="./dump_path",
        rank=(),
        step=(),
        level="L1",
        enable_dataloader=False,
        section=StatisticsConfig(),
    )
    assert dataclasses.asdict(config.section) == {
        "scope": (),
        "api_list": (),
        "data_mode": ("all",),
        "slices": (),
        "request_id": None,
        "summary_mode": "statistics",
        "tensor_list": (),
    }


# The 1.1.1 defaults (docs and its config.json), written out here independently of the model.
SECTION_DEFAULTS = {
    # slice and request_id: msprobe 26.2.0's keys (docs/pytorch/inference.md)
    "statistics": {"scope": (), "api_list": (), "data_mode": ("all",), "slices": (), "request_id": None,
                   "summary_mode": "statistics", "tensor_list": ()},
    "tensor": {
        "scope": (),
        "api_list": (),
        "data_mode": ("all",),
        "slices": (),
        "request_id": None,
        "file_format": "npy",
        "online_run_ut": False,
        "nfs_path": None,
        "host": None,
        "port": None,
        "tls_path": "./",
        "online_run_ut_recompute": False,
    },
    "run_ut": {
        "white_list": (),
        "black_list": (),
        "error_data_path": "./",
        "is_online": False,
        "nfs_path": None,
        "host": None,
        "port": None,
        "rank_list": (0,),
        "tls_path": "./",
    },
    "overflow_check": {"overflow_nums": 1, "check_mode": "all"},
    "free_benchmark": {
        "scope": (),
        "api_list": (),
        "fuzz_device": "npu",
        "pert_mode": "improve_precision",
        "handler_type": "check",
        "fuzz_level": "L1",
        "fuzz_stage": "forward",
        "if_preheat": False,
        "preheat_step": 15,
        "max_sample": 20,
    },
    "grad_probe": {"grad_level": "L1", "param_list": (), "bounds": (-1.0, 0.0, 1.0)},
}


@pytest.mark.parametrize("task", sorted(SECTION_DEFAULTS))
def test_section_defaults(load, task):
    config = load({"task": task, "dump_path": "./out"})
    assert dataclasses.asdict(config.section) == SECTION_DEFAULTS[task]
    assert (config.rank, config.step, config.level, config.enable_dataloader) == ((), (), "L1", False)


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_1_1_1_default_config_file_equals_builtin_defaults(framework):
    assert load_config(EXAMPLES / "default_1_1_1.json", framework=framework) == load_config(
        framework=framework
    )


# --- the 1.1.1 example configs ---------------------------------------------------------------


def _as_loaded(key: str, value: object) -> object:
    """What the loader makes of a valid JSON value: lists become tuples, 1.1.1's "not set" becomes None."""
    if isinstance(value, list):
        return tuple(value)
    if (key in ("nfs_path", "host") and value == "") or (key == "port" and value == -1):
        return None
    return value


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_example_config_loads(path, msprobe_log):
    raw = json.loads(path.read_text())
    written_for = path.stem.split("_")[0]
    for framework in ("pytorch", "mindspore") if written_for == "default" else (written_for,):
        config = load_config(path, framework=framework)
        assert (config.task, config.level) == (raw["task"], raw.get("level", "L1"))
        assert config.dump_path == raw.get("dump_path", "./dump_path")
        for key, value in raw.get(raw["task"], {}).items():
            attribute = "api_list" if key == "list" else key
            assert getattr(config.section, attribute) == _as_loaded(key, value), key
    assert not [r for r in msprobe_log.records if r.levelname == "WARNING"], msprobe_log.text()


@pytest.mark.parametrize("name", ["pytorch_run_ut", "pytorch_online_run_ut_tcp"])
def test_debugger_rejects_run_ut_examples(name):
    with pytest.raises(ConfigError) as excinfo:
        load_debugger_config(EXAMPLES / f"{name}.json", framework="pytorch")
    assert problems(excinfo) == {"task": "run_ut"}
    assert "run_ut configures the `msprobe -f pytorch run_ut` command, not the debugger" in str(excinfo.value)


def test_debugger_accepts_collection_example():
    config = load_debugger_config(EXAMPLES / "pytorch_free_benchmark.json", framework="pytorch")
    assert config.section_as(FreeBenchmarkConfig).api_list == ("conv2d",)


# --- all problems at once, and the message format ---------------------------------------------


def test_every_problem_is_reported_at_once(load):
    config = base(
        "tensor",
        {"data_mode": ["all", "forward"], "file_format": "pt", "port": 70000, "online_run_ut": "yes"},
        dump_path=5,
        rank=[1, -1],
        step=["x", "2-3"],
        level="L9",
        enable_dataloader=1,
    )
    with pytest.raises(ConfigError) as excinfo:
        load(config)
    assert problems(excinfo) == {
        "dump_path": 5,
        "rank[1]": -1,
        "step[0]": "x",
        "level": "L9",
        "enable_dataloader": 1,
        "tensor.data_mode": ["all", "forward"],
        "tensor.file_format": "pt",
        "tensor.port": 70000,
        "tensor.online_run_ut": "yes",
    }
    lines = str(excinfo.value).splitlines()
    assert len(lines) == 1 + 9 and "9 problems" in lines[0]
    assert "  tensor.file_format: got 'pt'; allowed: one of 'npy', 'bin'" in lines
    assert "  level: got 'L9'; allowed: one of 'L0', 'L1', 'L2', 'mix', 'debug'" in lines


def test_message_names_path_value_and_allowed(load):
    with pytest.raises(ConfigError) as excinfo:
        load(base(section={"summary_mode": "crc"}))
    assert str(excinfo.value).splitlines()[1:] == [
        "  statistics.summary_mode: got 'crc'; allowed: one of 'statistics', 'md5', 'xor'"
    ]
    assert excinfo.value.problems[0].allowed == "one of 'statistics', 'md5', 'xor'"


# --- common keys and overrides ---------------------------------------------------------------


def test_dump_path_is_required_in_a_file(load):
    with pytest.raises(ConfigError) as excinfo:
        load({"task": "statistics"})
    assert "dump_path: got nothing; allowed: a non-empty string (required" in str(excinfo.value)
    assert load({"task": "statistics"}, dump_path="/tmp/x").dump_path == "/tmp/x"


def test_arguments_override_the_file_and_select_the_section(load):
    config = load(
        {"task": "statistics", "dump_path": "./a", "level": "L1", "step": [0], "tensor": {"list": ["relu"]}},
        task="tensor",
        dump_path="./b",
        level="mix",
        step=[3, "5-6"],
    )
    assert (config.task, config.dump_path, config.level, config.step) == ("tensor", "./b", "mix", (3, 5, 6))
    assert config.section_as(TensorConfig).api_list == ("relu",)


def test_invalid_arguments_are_named_as_arguments(load):
    with pytest.raises(ConfigError) as excinfo:
        load(base(), task="tensr", level="L5", step=[2, -1], dump_path="")
    assert problems(excinfo) == {
        "task (argument)": "tensr",
        "level (argument)": "L5",
        "step[1] (argument)": -1,
        "dump_path (argument)": "",
    }


def test_an_overridden_file_value_is_not_read(load):
    assert load(base(level="bogus"), level="L0").level == "L0"


def test_arguments_are_validated_without_a_file():
    with pytest.raises(ConfigError) as excinfo:
        load_config(framework="pytorch", level="L5")
    assert problems(excinfo) == {"level (argument)": "L5"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("enable_dataloader", 1), ("rank", [True]), ("rank", "0-3"), ("dump_path", ["a"]), ("task", "Tensor")],
)
def test_common_key_types(load, key, value):
    with pytest.raises(ConfigError) as excinfo:
        load(base(**{key: value}))
    assert list(problems(excinfo).values()) == [True if key == "rank" and value == [True] else value]


def test_null_means_not_given(load):
    config = load(base("tensor", {"nfs_path": None, "port": None, "list": None}, rank=None))
    tensor = config.section_as(TensorConfig)
    assert (tensor.nfs_path, tensor.port, tensor.api_list, config.rank) == (
        None,
        None,
        (),
        (),
    )


def test_enable_dataloader_true_warns_deprecation(load, msprobe_log):
    assert load(base(enable_dataloader=True)).enable_dataloader is True
    assert "enable_dataloader is deprecated" in msprobe_log.text()


def test_enable_dataloader_is_pytorch_only(load):
    with pytest.raises(ConfigError) as excinfo:
        load(base(enable_dataloader=True), framework="mindspore")
    assert problems(excinfo) == {"enable_dataloader": True}


def test_run_ut_configures_both_frameworks_and_online_only_on_pytorch(load):
    config = load(base("run_ut", {"white_list": ["add"]}), framework="mindspore")
    assert config.section.white_list == ("add",)
    with pytest.raises(ConfigError) as excinfo:
        load(base("run_ut", {"is_online": True, "nfs_path": "/nfs"}), framework="mindspore")
    assert problems(excinfo) == {"run_ut.is_online": True}
    assert load(base("run_ut", {"is_online": True, "nfs_path": "/nfs"}), framework="pytorch").section.is_online


def test_effective_section_must_be_an_object(load):
    with pytest.raises(ConfigError) as excinfo:
        load(base("statistics", ["md5"]))
    assert problems(excinfo) == {"statistics": ["md5"]}


def test_only_the_effective_section_is_validated(load):
    config = load({**base("statistics"), "tensor": {"file_format": "pt"}, "grad_probe": {"bounds": "x"}})
    assert config.task == "statistics"


# --- warnings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({**base(), "levle": "L1"}, "'levle' is not known to msprobe and is ignored; did you mean 'level'?"),
        (
            {**base(), "statistcs": {}},
            "'statistcs' is not known to msprobe and is ignored; did you mean 'statistics'?",
        ),
        (
            base(section={"summary_mod": "md5"}),
            "'statistics.summary_mod' is not known to msprobe and is ignored; did you mean 'summary_mode'?",
        ),
        ({**base(), "overflow_check": {"overflow_num": 3}}, "did you mean 'overflow_nums'?"),
        (
            {**base(), "zzz": 1},
            "'zzz' is not known to msprobe and is ignored; known keys here: task, dump_path",
        ),
    ],
)
def test_unknown_key_warns_with_nearest_known_key(load, msprobe_log, config, expected):
    load(config)
    assert expected in msprobe_log.text()


def test_retired_keys_warn(load, msprobe_log):
    load(
        {
            **base(),
            "seed": 1234,
            "is_deterministic": False,
            "acl_config": "./acl.json",
            "tensor": {"backward_input": ""},
        }
    )
    retired = [m for m in msprobe_log.messages if "no longer used since msprobe 1.1.1" in m]
    assert len(retired) == 4 and "'tensor.backward_input'" in retired[-1]


def test_duplicate_key_warns(load, msprobe_log):
    assert load('{"task": "statistics", "dump_path": "a", "dump_path": "b"}').dump_path == "b"
    assert "'dump_path' appears more than once" in msprobe_log.text()


def test_another_tasks_section_that_is_not_an_object_warns(load, msprobe_log):
    load({**base(), "tensor": "npy"})
    assert "'tensor' should be an object" in msprobe_log.text()


# --- the result ------------------------------------------------------------------------------


def test_config_is_immutable(load):
    config = load(base("free_benchmark", {"list": ["relu"]}, rank=[0, "2-3"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.level = "L0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.section.pert_mode = "add_noise"
    assert isinstance(config.section, FreeBenchmarkConfig) and config.rank == (0, 2, 3)
    assert isinstance(config.section_as(FreeBenchmarkConfig).api_list, tuple)


def test_the_section_of_another_task_is_refused(load):
    config = load(base("statistics"))
    assert config.section_as(StatisticsConfig) is config.section
    with pytest.raises(TypeError, match="task is 'statistics'; its section is a StatisticsConfig, not a TensorConfig"):
        config.section_as(TensorConfig)
    assert not config.is_static_graph


def test_relative_path_is_resolved_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "c.json").write_text(json.dumps(base("tensor")))
    monkeypatch.chdir(tmp_path)
    assert isinstance(load_config("c.json", framework="pytorch").section, TensorConfig)
    with pytest.raises(ConfigError) as excinfo:
        load_config("missing.json", framework="pytorch")
    assert excinfo.value.file == os.path.join(str(tmp_path), "missing.json")


def _documented_examples() -> list[tuple[str, str]]:
    """(framework, JSON text) of every ```json block in docs/config.md; MindSpore when the line
    introducing the block names it."""
    text = (Path(__file__).parents[3] / "docs" / "config.md").read_text(encoding="utf-8")
    examples = []
    for intro, block in re.findall(r"([^\n]*)\n\n```json\n(.*?)```", text, re.S):
        examples.append(("mindspore" if "MindSpore" in intro else "pytorch", block))
    return examples


def test_documented_examples_load(load, msprobe_log):
    examples = _documented_examples()
    assert len(examples) == 10
    for framework, block in examples:
        load(block, framework=framework)
    assert msprobe_log.messages == []
