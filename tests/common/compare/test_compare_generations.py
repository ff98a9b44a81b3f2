"""What msprobe 26.2.0 records differently by design, read in common terms (docs/compare.md#matching): its shorter
gradient lists put back at their tensors' places, a gradient one side leaves out read as null, 26.2.0-only
``parameters`` rows left out, module entries paired wherever each side wrote them. The dumps of real models are
in tests/pytorch/test_files_26.py; these pin each rule on its own."""

from __future__ import annotations

import json
import logging
import sys

from msprobe.core.compare.align.entries import align_entries, pair_rows
from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.compare.read import comparable_dumps, comparable_rows, gradients_in_place, read_dump
from msprobe.core.compare.read.rows import flatten_entry
from msprobe.core.graph.inputs import Job
from msprobe.core.graph.run import graph_one


def tensor(requires_grad: bool, shape=(2,)) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": 1.0, "Min": 0.0,
            "Mean": 0.5, "Norm": 1.0, "requires_grad": requires_grad}


GATE = "Module.gate.Gate"  # gate(mask, x, scale=s): mask needs no gradient, x does, s is a keyword tensor
FORWARD = {"input_args": [tensor(False), tensor(True)], "input_kwargs": {"scale": tensor(False)},
           "output": [tensor(True), {"type": "int", "value": 3}, tensor(True)]}


def test_26s_gradients_go_back_to_their_tensors_places():
    theirs = {f"{GATE}.forward.0": FORWARD,
              f"{GATE}.backward.0": {"input": [None, "grad out 2"], "output": ["grad x"]}}
    spread = gradients_in_place(theirs)[f"{GATE}.backward.0"]
    assert spread == {"input": [None, None, "grad out 2"], "output": [None, "grad x", None]}


def test_ours_and_1_1_1s_lists_stay_as_they_are():
    ours = {f"{GATE}.forward.0": FORWARD,
            f"{GATE}.backward.0": {"input": ["a", None, "b"], "output": [None, "grad x", None]}}
    assert gradients_in_place(ours) == ours
    every_input_needs_one = {"Torch.mul.0.forward": {"input_args": [tensor(True), tensor(True)],
                                                     "output": [tensor(True)]},
                             "Torch.mul.0.backward": {"input": ["g"], "output": ["ga", "gb"]}}
    assert gradients_in_place(every_input_needs_one) == every_input_needs_one
    no_forward = {f"{GATE}.backward.0": {"input": ["g"], "output": ["grad x"]}}  # data_mode backward only
    assert gradients_in_place(no_forward) == no_forward


def _rows(name: str, entry: dict):
    return flatten_entry(name, entry)


def test_a_gradient_one_side_leaves_out_is_a_null_on_both():
    name = f"{GATE}.backward.0"
    ours = _rows(name, {"input": [tensor(False)], "output": [None, tensor(False)]})
    theirs = _rows(name, {"input": [tensor(False)], "output": []})
    pairs = pair_rows(ours, theirs, entries=(name, name))
    assert [(p.npu.suffix, p.bench and p.bench.suffix) for p in pairs] == [
        ("input.0", "input.0"), ("output.0", "output.0"), ("output.1", None)]  # a missing tensor stays missing
    left_out = pair_rows(_rows(name, {"output": [None, None]}), _rows(name, {"output": []}), entries=(name, name))
    assert [(p.npu.name, p.bench.name, p.bench.value) for p in left_out] == [
        (f"{name}.output.0", f"{name}.output.0", None), (f"{name}.output.1", f"{name}.output.1", None)]
    assert all("leaves it out" in p.note for p in left_out)
    forward = f"{GATE}.forward.0"  # a forward null is an argument's value: it stays one-sided
    (alone,) = pair_rows(_rows(forward, {"input_args": [None]}), _rows(forward, {"input_args": []}),
                         entries=(forward, forward))
    assert alone.bench is None


def test_module_entries_written_in_another_order_pair_by_name():
    def entry(name):
        return {name: flatten_entry(name, {"input": [tensor(False)], "output": [tensor(False)]})}

    norm, grads = "Module.ln.LayerNorm.backward.0", "Module.ln.LayerNorm.parameters_grad.0"
    npu = {**entry("Module.fc.Linear.backward.0"), **entry(norm), **entry(grads)}
    bench = {**entry("Module.fc.Linear.backward.0"), **entry(grads), **entry(norm)}
    assert sorted(align_entries(npu, bench), key=str) == sorted(
        [("Module.fc.Linear.backward.0",) * 2, (norm, norm), (grads, grads)], key=str)
    apis = {**entry("Torch.add.0.forward"), **entry("Torch.mul.0.forward")}
    swapped = {**entry("Torch.mul.0.forward"), **entry("Torch.add.0.forward")}
    assert any(None in pair for pair in align_entries(apis, swapped))  # an API's name is no identity


def _dump(tmp_path, name: str, data: dict):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"task": "statistics", "level": "L0", "data": data}))
    return read_dump(path)


def test_parameters_rows_of_one_side_only_are_left_out_and_logged(tmp_path, caplog):
    forward = {"input_args": [tensor(True)], "input_kwargs": {}, "output": [tensor(True)]}
    theirs = _dump(tmp_path, "theirs", {"Module.fc.Linear.forward.0": {**forward, "parameters": {
        "weight": tensor(True, (2, 2)), "bias": tensor(True)}}})
    ours = _dump(tmp_path, "ours", {"Module.fc.Linear.forward.0": forward})
    with caplog.at_level(logging.INFO, logger="msprobe"):
        npu_rows, bench_rows = comparable_rows(*comparable_dumps(ours, theirs))
    assert [r.suffix for r in bench_rows["Module.fc.Linear.forward.0"]] == ["input.0", "output.0"]
    assert [r.suffix for r in npu_rows["Module.fc.Linear.forward.0"]] == ["input.0", "output.0"]
    (line,) = [r.getMessage() for r in caplog.records if "parameters rows" in r.getMessage()]
    assert "2 parameters rows of bench only" in line and "theirs.json" in line
    both = comparable_rows(*comparable_dumps(theirs, theirs))[0]["Module.fc.Linear.forward.0"]
    assert [r.suffix for r in both] == ["input.0", "output.0", "parameters.weight", "parameters.bias"]


def test_comparable_dumps_spread_26s_lists_and_leave_ours_as_they_are(tmp_path):
    theirs = _dump(tmp_path, "theirs", {f"{GATE}.forward.0": FORWARD,
                                        f"{GATE}.backward.0": {"input": [None, "grad out 2"], "output": ["grad x"]}})
    ours = _dump(tmp_path, "ours", {f"{GATE}.forward.0": FORWARD,
                                    f"{GATE}.backward.0": {"input": ["a", None, "b"], "output": [None, "gx", None]}})
    npu, bench = comparable_dumps(ours, theirs)
    spread = {"input": [None, None, "grad out 2"], "output": [None, "grad x", None]}
    assert bench.entries[f"{GATE}.backward.0"] == spread
    assert npu.entries == ours.entries and (npu.path, bench.path) == (ours.path, theirs.path)
    assert theirs.entries[f"{GATE}.backward.0"]["output"] == ["grad x"]  # the dump read stays as it was written


def _gate_rank(tmp_path, name: str, backward: dict):
    """A rank directory whose dump.json holds GATE's forward and backward entries (``backward``: the lists)."""
    rank = tmp_path / name / "rank"
    rank.mkdir(parents=True)
    grad = tensor(False)
    lists = {part: [grad if value else None for value in values] for part, values in backward.items()}
    data = {f"{GATE}.forward.0": FORWARD, f"{GATE}.backward.0": lists}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L0", "data": data}))
    return rank


def _graph_document(tmp_path, npu, bench, name: str) -> dict:
    out = tmp_path / name
    out.mkdir()
    written = graph_one(Job(npu, bench, name), out, _no_loader, CompareOptions(progress=False), overflow=False)
    return json.loads(written.vis.read_text())


def _no_loader(path, spec):
    raise AssertionError("a statistics graph compare loads no tensor file")


def test_the_graph_spreads_a_26_side_once_and_draws_it_as_ours(tmp_path, monkeypatch):
    """graph_one reads both dumps through compare.read.comparable_dumps once: one pass of the spreading per dump
    (every module that holds the function counts), and a 26.2.0 side's nodes are those of ours."""
    ours = _gate_rank(tmp_path, "ours", {"input": [1, 0, 1], "output": [0, 1, 0]})
    theirs = _gate_rank(tmp_path, "theirs", {"input": [1, 1], "output": [1]})
    original, passes = gradients_in_place, []

    def counted(entries):
        passes.append(len(entries[f"{GATE}.backward.0"]["input"]))
        return original(entries)

    for module in list(sys.modules.values()):
        if getattr(module, "gradients_in_place", None) is original:
            monkeypatch.setattr(module, "gradients_in_place", counted)
    against_26 = _graph_document(tmp_path, ours, theirs, "ours_vs_26")
    assert sorted(passes) == [2, 3]  # one pass over each side's entries (theirs' gradient list holds 2)
    monkeypatch.undo()
    against_ours = _graph_document(tmp_path, ours, _gate_rank(tmp_path, "again", {"input": [1, 0, 1],
                                                                                 "output": [0, 1, 0]}), "ours_vs_ours")
    backward = f"{GATE}.backward.0"
    assert against_26["Bench"]["node"][backward] == against_ours["Bench"]["node"][backward]
    assert against_26["NPU"]["node"] == against_ours["NPU"]["node"]
    drawn = against_26["Bench"]["node"][backward]["output_data"]  # 26.2.0's [grad x] at x's place
    assert [drawn[f"{backward}.output.{i}"].get("value") for i in range(3)] == ["null", None, "null"]
