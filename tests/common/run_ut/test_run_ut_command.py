"""The replay commands' shared frame (``msprobe.core.run_ut.command``): what each outcome of a run exits
with and logs, for both frameworks' run_ut and multi_run_ut."""

from __future__ import annotations

import argparse

import pytest

from msprobe.core.config import ConfigError
from msprobe.core.run_ut.command import run_command, with_parts
from msprobe.core.run_ut.parallel import MAX_PARTS, PartError
from msprobe.core.run_ut.replay_common import RunUtError, TensorFileError
from msprobe.core.run_ut.report import ReportError


def _line(summary: dict) -> str:
    return f"{summary['apis']} APIs; results in {summary['result_csv']}"


def _summary(**extra) -> dict:
    return {"apis": 3, "result_csv": "result.csv", **extra}


@pytest.mark.parametrize("error", [RunUtError("no dump.json"), TensorFileError("gone"), ReportError("bad csv"),
                                   PartError("part 1 died"), ConfigError("bad config")])
def test_bad_input_is_one_error_and_exit_2(error, msprobe_log) -> None:
    def run():
        raise error

    assert run_command("run_ut", run, _line) == 2
    assert msprobe_log.messages == [f"run_ut: {error}"]


def test_a_bug_is_not_taken_for_bad_input() -> None:
    def run():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_command("run_ut", run, _line)


def test_a_finished_run_logs_its_line_and_exits_by_what_it_judged(msprobe_log) -> None:
    assert run_command("multi_run_ut", lambda: (_summary(), 2), _line) == 0
    assert msprobe_log.messages == ["multi_run_ut: 3 APIs; results in result.csv"]
    assert run_command("run_ut", lambda: (_summary(), 0), _line) == 1
    assert "run_ut: no API was checked" in msprobe_log.messages[-1]
    unreadable = [{"message": f"tensor file {k} is missing"} for k in range(5)]
    assert run_command("run_ut", lambda: (_summary(input_errors=unreadable), 2), _line) == 2
    assert "5 API(s) not checked" in msprobe_log.messages[-1] and "file 2 is" in msprobe_log.messages[-1]
    assert "file 3 is" not in msprobe_log.messages[-1]  # three named, the rest in the result CSV


def test_an_exit_code_the_run_decided_is_kept(msprobe_log) -> None:
    assert run_command("run_ut", lambda: 0, _line) == 0  # online run_ut reported itself
    assert msprobe_log.messages == []


def test_multi_run_ut_takes_the_run_ut_flags_and_the_parts() -> None:
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-api_info", required=True)

    parser = argparse.ArgumentParser()
    with_parts(configure)(parser)
    args = parser.parse_args(["-api_info", "dump.json", "-n", "3"])
    assert (args.api_info, args.parts) == ("dump.json", 3)
    assert parser.parse_args(["-api_info", "d"]).parts is None
    with pytest.raises(SystemExit):  # -n out of range: a usage error
        parser.parse_args(["-api_info", "d", "-n", str(MAX_PARTS + 1)])
