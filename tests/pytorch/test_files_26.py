"""msprobe 26.2.0's files both ways (docs/dump_format.md#two-layouts): its dump (``step{N}/proc{pid}/``, the
``framework`` key, grouped stack.json) read by compare and ``msprobe graph`` beside ours, and the same layout
written by msprobe when config.json says ``"dump_format": "26"``, with the training's numbers unchanged."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from dump_json import fixture_maker, write_config
from zoo import ZOO, train

from msprobe.core.compare.read import process_dirs, read_dump, read_stack
from msprobe.core.config import ConfigError
from msprobe.pytorch import PrecisionDebugger, compare, compare_distributed

DATA = Path(__file__).parents[1] / "data" / "up262_gpt2"
GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")


def _our_dump(out: Path, maker: str = "up262_gpt2", **common) -> Path:
    """Our dump of a fixture's model and step (``tests/data/{maker}/make_{maker}.py``: the model and dump config
    26.2.0's fixture was made with), with the fixture's config (plus ``common`` keys)."""
    make = fixture_maker(maker)
    out.mkdir(parents=True)
    config = out / "config.json"
    config.write_text(json.dumps({**make.DUMP_CONFIG, "dump_path": str(out), **common}))
    model, batch = make.build()
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model=model)
    make.train_step(model, batch)
    debugger.stop()
    debugger.step()
    return out / "step0"


def _rows(result) -> dict[str, str | None]:
    """Row name (the NPU side's, else the bench side's) → the bench row it was paired with (None: unpaired)."""
    return {(r.npu or r.bench).name: (r.bench.name if r.npu and r.bench else None) for r in result.results}


def _same_rows_both_ways(ours: Path, again: Path, theirs: Path, out: Path) -> dict[str, str | None]:
    """compare(ours, 26.2.0's) and compare(26.2.0's, ours) give the rows of compare(ours, ours), each paired with
    the row of its own name (docs/dump_format.md#what-the-two-generations-record-differently); returns them."""
    def rows(npu: Path, bench: Path, name: str) -> dict[str, str | None]:
        return _rows(compare({"npu_path": str(npu), "bench_path": str(bench)}, out / name))

    same = rows(ours, again, "ours_vs_ours")
    assert all(bench == name for name, bench in same.items())
    assert rows(ours, theirs, "ours_vs_26") == same
    assert rows(theirs, ours, "26_vs_ours") == same
    return same


def _first_divergences(ours: Path, theirs: Path, out: Path) -> list:
    """The first divergence of compare(ours, 26.2.0's) and of compare(26.2.0's, ours)."""
    return [compare({"npu_path": str(npu), "bench_path": str(bench)}, out / name).first_divergence
            for npu, bench, name in ((ours, theirs, "first_ours"), (theirs, ours, "first_26"))]


def test_a_26_dump_of_gpt2_pairs_with_ours_by_step_directory(tmp_path, caplog):
    ours = _our_dump(tmp_path / "ours")
    theirs = DATA / "step0"
    assert [d.name for d in process_dirs(theirs, "bench_path").values()] == ["proc14429"]
    assert read_dump(theirs / "proc14429" / "dump.json").framework == "pytorch"
    result = compare_distributed(ours, theirs, tmp_path / "steps")
    assert list(result.ranks) == [0]  # step0/rank against step0/proc14429: both are rank 0
    ours_json, theirs_json = ours / "rank" / "dump.json", theirs / "proc14429" / "dump.json"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="msprobe"):
        same = _same_rows_both_ways(ours_json, _our_dump(tmp_path / "again") / "rank" / "dump.json", theirs_json,
                                    tmp_path)
    # forward and backward modules, parameters_grad, a ModelOutput's unset fields, gradients 26.2.0 leaves out
    kinds = (".forward.", ".backward.", ".parameters_grad.", ".output.0.hidden_states")
    assert all(any(kind in name for name in same) for kind in kinds)
    assert "Module.transformer.wte.Embedding.backward.0.output.0" in same  # the token ids': no gradient
    assert sum("29 parameters rows of bench only" in r.getMessage() for r in caplog.records) == 1
    assert sum("29 parameters rows of npu only" in r.getMessage() for r in caplog.records) == 1
    # two of 26.2.0's dumps: its parameters are rows like any other
    theirs_twice = _rows(compare({"npu_path": str(theirs_json), "bench_path": str(theirs_json)}, tmp_path / "26"))
    parameters = [name for name in theirs_twice if ".forward.0.parameters." in name]
    assert len(parameters) == 29 and all(theirs_twice[name] == name for name in parameters)
    assert "Module.lm_head.Linear.forward.0.parameters.weight" in parameters
    # The same run: nothing beyond rounding, though 26.2.0's float32 Mean and Norm of the attention mask
    # (float32's lowest value) overflow to -inf and inf (docs/compare.md#first-divergence-beyond-rounding).
    assert _first_divergences(ours_json, theirs_json, tmp_path) == [None, None]
    # The same tensors: Max and Min exactly, Norm and Mean up to 26.2.0's float32 reductions (ours: float64).
    ours_data = read_dump(ours_json).entries
    theirs_data = read_dump(theirs_json).entries
    outputs = [(ours_data[n]["output"][0], theirs_data[n]["output"][0]) for n in ours_data
               if ".forward." in n and n in theirs_data and isinstance(ours_data[n]["output"][0], dict)
               and "Max" in ours_data[n]["output"][0]]
    assert len(outputs) > 20
    for mine, upstream in outputs:
        assert (mine["Max"], mine["Min"]) == (upstream["Max"], upstream["Min"])
        assert mine["Norm"] == pytest.approx(upstream["Norm"], rel=1e-6)
        assert mine["Mean"] == pytest.approx(upstream["Mean"], rel=1e-5, abs=1e-7)


def test_26s_gradients_pair_with_ours_at_their_tensors_places(tmp_path):
    """26.2.0 writes only the gradients of tensors that require one (tests/data/up262_tagger): ``gate(mask, x)``'s
    backward ``output`` is ``[grad x]`` where ours is ``[null, grad x]``, the LSTM's ``input`` ``[null, grad h,
    null]`` (data, h, c) where ours has one per output value (data, the three index tensors, h, c)."""
    data = DATA.parent / "up262_tagger" / "step0"
    (proc,) = [d.name for d in data.iterdir()]
    ours = _our_dump(tmp_path / "ours", "up262_tagger") / "rank" / "dump.json"
    theirs = data / proc / "dump.json"
    same = _same_rows_both_ways(ours, _our_dump(tmp_path / "again", "up262_tagger") / "rank" / "dump.json",
                                theirs, tmp_path)
    ours_data, theirs_data = read_dump(ours).entries, read_dump(theirs).entries
    gate, lstm = "Module.gate.Gate.backward.0", "Module.lstm.LSTM.backward.0"
    assert len(theirs_data[gate]["output"]) == 1 and ours_data[gate]["output"][0] is None
    assert len(theirs_data[lstm]["input"]) == 3 and len(ours_data[lstm]["input"]) == 6
    for mine, upstream in ((ours_data[gate]["output"][1], theirs_data[gate]["output"][0]),
                           (ours_data[lstm]["input"][4], theirs_data[lstm]["input"][1])):
        assert (mine["shape"], mine["Max"], mine["Min"]) == (upstream["shape"], upstream["Max"], upstream["Min"])
        assert mine["Norm"] == pytest.approx(upstream["Norm"], rel=1e-6)
    assert {f"{gate}.output.1", f"{lstm}.input.4", f"{lstm}.output.0"} <= set(same)
    result = compare({"npu_path": str(theirs), "bench_path": str(ours)}, tmp_path / "values")
    placed = {r.npu.name: r for r in result.results}
    assert placed[f"{gate}.output.1"].npu.value["Max"] == ours_data[gate]["output"][1]["Max"]
    assert placed[f"{gate}.output.0"].npu.value is None and placed[f"{lstm}.output.0"].npu.value is None
    assert any("leaves it out" in message for message in placed[f"{lstm}.output.0"].messages)


def test_graph_builds_and_compares_across_the_two_layouts(tmp_path):
    from msprobe.core.cli import main

    ours = _our_dump(tmp_path / "ours")
    source = tmp_path / "input.json"
    source.write_text(json.dumps({"npu_path": str(ours), "bench_path": str(DATA / "step0")}))
    assert main(["graph", "-i", str(source), "-o", str(tmp_path / "graph")]) == 0
    (vis,) = (tmp_path / "graph").glob("compare_rank_*.vis")
    assert "Module.transformer.h.0.attn.GPT2Attention.forward.0" in vis.read_text()


def test_graph_of_26s_dump_shows_its_gradients_at_their_tensors_places(tmp_path):
    """``msprobe graph`` with 26.2.0's tagger on the NPU side reads its gradient lists as compare does: the gate's
    ``[grad x]`` is shown as ``output.1`` (``output.0``: the mask's, none), with its comparison to ours."""
    from msprobe.core.cli import main

    (theirs,) = (DATA.parent / "up262_tagger" / "step0").iterdir()
    source = tmp_path / "input.json"
    source.write_text(json.dumps({"npu_path": str(theirs),
                                  "bench_path": str(_our_dump(tmp_path / "ours", "up262_tagger") / "rank")}))
    assert main(["graph", "-i", str(source), "-o", str(tmp_path / "graph")]) == 0
    (vis,) = (tmp_path / "graph").glob("compare_*.vis")
    (gate,) = [node for node in _nodes(json.loads(vis.read_text())["NPU"])
               if node.get("id") == "Module.gate.Gate.backward.0"]
    name = "Module.gate.Gate.backward.0.output."
    assert gate["output_data"][f"{name}0"] == {"value": "null"}
    assert gate["output_data"][f"{name}1"]["Max diff"] == "0.0" and gate["output_data"][f"{name}1"]["shape"] == "[3, 8]"


def _nodes(value):
    """Every object with an ``id`` under a .vis document's side."""
    if isinstance(value, dict):
        yield from ([value] if "id" in value else [])
        for item in value.values():
            yield from _nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _nodes(item)


@pytest.fixture(scope="module")
def bare_run():
    return train(GPT2)


def _same_run(expected, observed) -> bool:
    return all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
               for run_a, run_b in zip(expected, observed) for a, b in zip(run_a, run_b))


def test_dump_format_26_writes_26_2_0s_layout_with_the_same_entries_and_numbers(tmp_path, bare_run):
    for name, common in (("default", {}), ("new", {"dump_format": "26"})):
        config = write_config(tmp_path, name, "statistics", "mix", {}, **common)
        assert _same_run(bare_run, train(GPT2, PrecisionDebugger(config_path=str(config)))), name
    step = tmp_path / "new" / "step0"
    (proc,) = [d.name for d in step.iterdir()]
    assert proc == f"proc{os.getpid()}"
    new_dump = json.loads((step / proc / "dump.json").read_text())
    old_dump = json.loads((tmp_path / "default" / "step0" / "rank" / "dump.json").read_text())
    assert list(new_dump) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert new_dump["framework"] == "pytorch" and "framework" not in old_dump
    assert new_dump["data"].keys() == old_dump["data"].keys()
    grouped = json.loads((step / proc / "stack.json").read_text())
    assert list(grouped) == [str(i) for i in range(len(grouped))]
    names = [name for names, _ in grouped.values() for name in names]
    assert len(names) == len(set(names)) and any(len(names) > 1 for names, _ in grouped.values())
    frames = [tuple(frames) for _, frames in grouped.values()]
    assert len(frames) == len(set(frames))  # one group per distinct stack
    assert read_stack(step / proc / "stack.json") == read_stack(tmp_path / "default" / "step0" / "rank" / "stack.json")
    for index in (0, 1):  # each step in the new layout, and its rows those of the default layout's
        result = compare_distributed(tmp_path / "new" / f"step{index}", tmp_path / "default" / f"step{index}",
                                     tmp_path / f"cmp{index}")
        assert result.first_rank is None and result.ranks[0].rows > 500


def test_a_run_in_26_layout_moves_an_earlier_processs_directory_aside(tmp_path):
    """Outside a distributed job each process has its own proc{pid}: a run moves what an earlier process (here
    26.2.0's own run, copied in) left in the dump_path aside, as it does with 1.1.1's ``rank``, so a step never
    holds two processes of rank 0."""
    shutil.copytree(DATA / "step0", tmp_path / "dump" / "step0")
    model = torch.nn.Linear(4, 2)
    debugger = PrecisionDebugger(config_path=str(write_config(tmp_path, "dump", "statistics", "L1", {},
                                                              dump_format="26")))
    debugger.start(model=model)
    model(torch.ones(3, 4)).sum().backward()
    debugger.stop()
    debugger.step()
    names = {d.name for d in (tmp_path / "dump" / "step0").iterdir()}
    (moved,) = names - {f"proc{os.getpid()}"}
    assert f"proc{os.getpid()}" in names and moved.startswith("proc14429.moved-")
    assert list(process_dirs(tmp_path / "dump" / "step0", "npu_path")) == [0]


def test_an_unknown_dump_format_is_a_one_line_error(tmp_path):
    config = write_config(tmp_path, "bad", "statistics", "L1", {}, dump_format="26.2.0")
    with pytest.raises(ConfigError) as error:
        PrecisionDebugger(config_path=str(config))
    message = str(error.value)
    assert "dump_format" in message and "'26.2.0'" in message and "'1.1.1'" in message and "'26'" in message


def test_run_ut_replays_every_api_of_a_26_dump(tmp_path):
    from msprobe.pytorch.run_ut.replay import run_ut

    dump = Path(__file__).parents[1] / "data" / "anomaly" / "up262_step0" / "proc13191" / "dump.json"
    result = run_ut(dump, tmp_path)
    assert [row.name for row in result.rows] == ["Functional.linear.0", "Torch.relu.0", "Tensor.__sub__.0",
                                                 "Torch.log.0", "Functional.linear.1", "Tensor.sum.0"]
    assert all(row.forward == "pass" and row.backward == "pass" for row in result.rows)
