"""The monitor's configuration: every key checked at construction, each problem one line naming the key,
the value and what is allowed; upstream's own files load."""

from __future__ import annotations

import json

import pytest

from msprobe.core.config.errors import ConfigError
from msprobe.core.monitor.config import DEFAULT_RULES, NEVER, CcConfig, load_monitor_config, parse_monitor_config

UPSTREAM_EXAMPLE = {  # the shape of upstream's documented example file
    "targets": {}, "xy_distribution": True, "forward_only": False, "backward_only": False, "all_xy": False,
    "wg_distribution": True, "mv_distribution": False, "param_distribution": False, "ur_distribution": False,
    "cc_distribution": {"enable": False, "cc_codeline": [], "cc_pre_hook": False, "cc_log_only": False},
    "format": "csv", "ops": ["norm", "min", "max", "nans"], "eps": 1e-8, "ndigits": 12, "start_step": 0,
    "step_interval": 1, "collect_times": 100000000, "alert": {"rules": [
        {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": False},
    "print_struct": False, "module_ranks": [], "dynamic_on": False,
}


def test_upstream_file_loads(tmp_path):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(UPSTREAM_EXAMPLE))
    config = load_monitor_config(path)
    assert config.xy_distribution and config.wg_distribution and not config.mv_distribution
    assert config.ops == ("norm", "min", "max", "nans") and config.ndigits == 12
    assert [(r.name, r.threshold) for r in config.rules] == [("AnomalyTurbulence", 0.5)]
    assert config.dynamic_on is False and config.cc_distribution == CcConfig() and not config.moe_distribution


def test_defaults():
    config = parse_monitor_config({})
    assert config.targets == () and config.formats == ("csv",) and config.collect_times == NEVER
    assert config.ops == ("norm",) and config.rules == DEFAULT_RULES
    assert config.dynamic_on is None


@pytest.mark.parametrize("raw, line", [
    ({"step_interval": 0}, "step_interval: got 0; allowed: an integer >= 1"),
    ({"start_step": -1}, "start_step: got -1; allowed: an integer >= 0"),
    ({"collect_times": "10"}, "collect_times: got '10'; allowed: an integer >= 1"),
    ({"xy_distribution": 1}, "xy_distribution: got 1; allowed: true or false (a JSON boolean)"),
    ({"ops": ["norm", "median"]},
     "ops[1]: got 'median'; allowed: one of min, max, norm, mean, zeros, nans, shape, dtype"),
    ({"ops": []}, "ops: got []; allowed: a non-empty list of"),
    ({"format": "parquet"}, "format: got 'parquet'; allowed: one of csv, sqlite, tensorboard"),
    ({"targets": ["fc1"]}, "targets: got ['fc1']; allowed: an object: module name -> what to watch"),
    ({"eps": 0}, "eps: got 0; allowed: a finite number > 0"),
    ({"xy_distrbution": True}, "xy_distrbution: got True; allowed: a monitor key: targets,"),
    ({"ur_distribution": True}, "ur_distribution: got True; allowed: false or absent (upstream-only feature"),
    ({"cc_distribution": {"enable": 1}}, "cc_distribution.enable: got 1; allowed: true or false"),
    ({"cc_distribution": {"cc_codeline": ["("]}}, "cc_distribution.cc_codeline[0]: got '('; allowed: a regular"),
    ({"cc_distribution": {"cc_pre": True}}, "cc_distribution.cc_pre: got True; allowed: one of enable,"),
    ({"moe_distribution": "yes"}, "moe_distribution: got 'yes'; allowed: true or false"),
    ({"forward_only": True, "backward_only": True}, "backward_only: got True; allowed: false when forward_only"),
    ({"alert": {"rules": [{"rule_name": "Spike"}]}}, "alert.rules[0].rule_name: got 'Spike'; allowed: one of"),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": -1}}]}},
     "alert.rules[0].args.threshold: got -1; allowed: a finite number > 0"),
    ({"alert": {"dump": "yes"}}, "alert.dump: got 'yes'; allowed: true or false"),
    ({"module_ranks": [0, -1]}, "module_ranks: got [0, -1]; allowed: a list of ranks"),
])
def test_each_bad_value_is_one_line_naming_key_value_and_allowed(raw, line):
    with pytest.raises(ConfigError) as caught:
        parse_monitor_config(raw, file="m.json")
    problems = [str(p) for p in caught.value.problems]
    assert len(problems) == 1 and problems[0].startswith(line), problems


def test_every_problem_reported_at_once(tmp_path):
    with pytest.raises(ConfigError) as caught:
        parse_monitor_config({"step_interval": 0, "format": "x", "ops": "norm"}, file="m.json")
    assert len(caught.value.problems) == 3
    assert str(caught.value).startswith("invalid config file m.json (3 problems):")


def test_unreadable_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="m.json: is not valid JSON"):
        load_monitor_config(path)
