"""The one Selector: step, rank, scope, list and data_mode, driven by begin/end calls in execution order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe.core.lifecycle.select import Selector

REFERENCE = str(Path(__file__).resolve().parents[1] / "data" / "reference-outputs") + "/mindspore"

# One training step of a small model at level mix, as an interceptor reports it: ("begin", name) when
# an entry starts, ("end", name) when a module's forward finishes.
MIX_STEP = [
    ("begin", "Module.conv.Conv2d.forward.0"),
    ("begin", "Functional.conv2d.0.forward"),
    ("end", "Module.conv.Conv2d.forward.0"),
    ("begin", "Functional.relu.0.forward"),
    ("begin", "Functional.softmax.0.forward"),
    ("begin", "Torch.max.0.forward"),
    ("begin", "Module.fc.Linear.forward.0"),
    ("begin", "Functional.linear.0.forward"),
    ("begin", "Tensor.add.0.forward"),
    ("end", "Module.fc.Linear.forward.0"),
    ("begin", "Torch.add.0.forward"),
    ("begin", "Functional.cross_entropy.0.forward"),
    ("begin", "Functional.cross_entropy.0.backward"),
    ("begin", "Torch.add.0.backward"),
    ("begin", "Tensor.add.0.backward"),
    ("begin", "Functional.linear.0.backward"),
    ("begin", "Module.fc.Linear.backward.0"),
    ("begin", "Torch.max.0.backward"),
    ("begin", "Functional.softmax.0.backward"),
    ("begin", "Functional.relu.0.backward"),
    ("begin", "Functional.conv2d.0.backward"),
    ("begin", "Module.conv.Conv2d.backward.0"),
]
ALL_ENTRIES = [name for event, name in MIX_STEP if event == "begin"]


def selected(selector: Selector, events=MIX_STEP) -> list[str]:
    chosen = []
    for event, name in events:
        if event == "begin":
            if selector.begin(name):
                chosen.append(name)
        else:
            selector.end(name)
    return chosen


def reference_l1_order() -> list[str]:
    """The execution order of the MindSpore L1 reference run (entries are written as they finish)."""
    with open(f"{REFERENCE}/ms_stat_L1/step0/rank/dump.json") as handle:
        return list(json.load(handle)["data"])


def reference_names(run: str) -> list[str]:
    with open(f"{REFERENCE}/{run}/step0/rank/dump.json") as handle:
        return list(json.load(handle)["data"])


# ---------------------------------------------------------------- step and rank
def test_empty_filters_select_every_step_rank_and_entry():
    selector = Selector()
    assert all(selector.selects_step(s) for s in (0, 1, 1000))
    assert all(selector.selects_rank(r) for r in (None, 0, 7))
    assert selector.last_step() is None
    assert selected(selector) == ALL_ENTRIES


def test_steps_and_ranks_select_listed_values_only():
    selector = Selector(steps=[0, 2, 5], ranks=[0, 3])
    assert [s for s in range(7) if selector.selects_step(s)] == [0, 2, 5]
    assert [r for r in range(5) if selector.selects_rank(r)] == [0, 3]
    assert selector.last_step() == 5


def test_rank_none_counts_as_rank_zero():
    assert Selector(ranks=[0]).selects_rank(None)
    assert not Selector(ranks=[1]).selects_rank(None)


# ---------------------------------------------------------------- scope
def test_scope_over_apis_is_an_inclusive_range_in_execution_order():
    selector = Selector(scope=["Functional.relu.0.forward", "Module.fc.Linear.forward.0"])
    assert selected(selector)[:6] == [
        "Functional.relu.0.forward",
        "Functional.softmax.0.forward",
        "Torch.max.0.forward",
        "Module.fc.Linear.forward.0",
        "Functional.linear.0.forward",  # a module range ends at the module's end, not its start
        "Tensor.add.0.forward",
    ]


def test_scope_ending_at_an_api_stops_right_after_it():
    selector = Selector(scope=["Functional.softmax.0.forward", "Torch.max.0.forward"])
    forwards = [n for n in selected(selector) if n.endswith("forward")]
    assert forwards == ["Functional.softmax.0.forward", "Torch.max.0.forward"]


def test_scope_selects_backward_of_forwards_it_selected():
    selector = Selector(scope=["Functional.softmax.0.forward", "Torch.max.0.forward"])
    assert selected(selector) == [
        "Functional.softmax.0.forward",
        "Torch.max.0.forward",
        "Torch.max.0.backward",
        "Functional.softmax.0.backward",
    ]


def test_scope_over_modules_covers_from_first_start_to_second_end():
    selector = Selector(scope=["Module.conv.Conv2d.forward.0", "Module.fc.Linear.forward.0"])
    forwards = [n for n in selected(selector) if ".forward" in n]
    assert forwards == ALL_ENTRIES[: ALL_ENTRIES.index("Tensor.add.0.forward") + 1]


def test_scope_of_backward_names_selects_that_stretch_of_backward():
    selector = Selector(scope=["Functional.linear.0.backward", "Module.fc.Linear.backward.0"])
    assert selected(selector) == ["Functional.linear.0.backward", "Module.fc.Linear.backward.0"]


def test_scope_like_the_mindspore_reference_run():
    selector = Selector(scope=["Tensor.__add__.0.forward", "Mint.abs.0.forward"])
    chosen = [name for name in reference_l1_order() if selector.begin(name)]
    forwards = [n for n in chosen if n.endswith("forward")]
    assert forwards == [n for n in reference_names("ms_scope") if n.endswith("forward")]
    # better than 1.1.1: the gradients of the selected calls come too
    assert [n for n in chosen if n.endswith("backward")] == [
        "Mint.abs.0.backward",
        "Tensor.__add__.0.backward",
    ]


def test_reset_starts_a_new_step():
    selector = Selector(scope=["Functional.softmax.0.forward", "Torch.max.0.forward"])
    first = selected(selector)
    again = selected(
        selector
    )  # same names without reset: the range is over, backwards of remembered forwards
    assert again == ["Torch.max.0.backward", "Functional.softmax.0.backward"]
    selector.reset()
    assert selected(selector) == first
    selector.reset()
    assert not selector.begin("Torch.max.0.backward")  # the forward selection was forgotten


# ---------------------------------------------------------------- list
def test_list_bare_word_matches_the_api_name_exactly():
    assert selected(Selector(names=["max"])) == ["Torch.max.0.forward", "Torch.max.0.backward"]
    assert selected(Selector(names=["softmax"])) == [
        "Functional.softmax.0.forward",
        "Functional.softmax.0.backward",
    ]


def test_list_bare_word_like_the_mindspore_reference_run():
    selector = Selector(names=["relu"])
    chosen = [name for name in reference_l1_order() if selector.begin(name)]
    assert chosen == reference_names("ms_list_relu")


def test_list_prefixed_kind_tells_tensor_add_from_torch_add():
    assert selected(Selector(names=["Tensor.add"])) == ["Tensor.add.0.forward", "Tensor.add.0.backward"]
    assert selected(Selector(names=["add"])) == [
        "Tensor.add.0.forward",
        "Torch.add.0.forward",
        "Torch.add.0.backward",
        "Tensor.add.0.backward",
    ]
    dotted = Selector(names=["linalg.norm"])
    assert dotted.begin("Torch.linalg.norm.0.forward") and not dotted.begin("Torch.norm.0.forward")


def test_list_full_names_match_exactly_and_a_backward_name_alone_selects_only_it():
    assert selected(Selector(names=["Torch.max.0.forward"])) == [
        "Torch.max.0.forward",
        "Torch.max.0.backward",
    ]
    assert selected(Selector(names=["Functional.linear.0.backward"])) == ["Functional.linear.0.backward"]
    assert selected(Selector(names=["Torch.max.1.forward"])) == []


def test_list_module_name_selects_everything_inside_the_module():
    selector = Selector(names=["Module.fc.Linear.forward.0"])
    assert selected(selector) == [
        "Module.fc.Linear.forward.0",
        "Functional.linear.0.forward",
        "Tensor.add.0.forward",
        "Tensor.add.0.backward",
        "Functional.linear.0.backward",
        "Module.fc.Linear.backward.0",
    ]


def test_list_module_class_expands_every_module_of_that_class():
    chosen = selected(Selector(names=["Conv2d"]))
    assert chosen == [
        "Module.conv.Conv2d.forward.0",
        "Functional.conv2d.0.forward",
        "Functional.conv2d.0.backward",
        "Module.conv.Conv2d.backward.0",
    ]


def test_scope_and_list_together_must_both_select():
    selector = Selector(
        scope=["Module.conv.Conv2d.forward.0", "Module.fc.Linear.forward.0"], names=["add", "relu"]
    )
    assert selected(selector) == [
        "Functional.relu.0.forward",
        "Tensor.add.0.forward",
        "Tensor.add.0.backward",
        "Functional.relu.0.backward",
    ]


# ---------------------------------------------------------------- data_mode
@pytest.mark.parametrize(
    ("modes", "wanted"),
    [
        (["all"], {"fi", "fo", "bi", "bo"}),
        (["forward"], {"fi", "fo"}),
        (["backward"], {"bi", "bo"}),
        (["input"], {"fi", "bi"}),
        (["output"], {"fo", "bo"}),
        (["forward", "input"], {"fi"}),
        (["backward", "output"], {"bo"}),
        (["forward", "backward", "output"], {"fo", "bo"}),
        (["input", "output"], {"fi", "fo", "bi", "bo"}),
    ],
)
def test_data_mode_combinations(modes, wanted):
    selector = Selector(data_mode=modes)
    for name in ("Torch.add.0", "Module.fc.Linear"):
        for direction, d in (("forward", "f"), ("backward", "b")):
            full = f"{name}.{direction}" if name.startswith("Torch") else f"{name}.{direction}.0"
            for part, p in (("input", "i"), ("output", "o")):
                assert selector.wants(full, part) == (d + p in wanted), (full, part)
            assert selector.wants(full) == any(w.startswith(d) for w in wanted)


# ---------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": [-1]}, "step [-1]"),
        ({"steps": [True]}, "step [True]"),
        ({"ranks": ["4-6"]}, "rank ['4-6']"),
        ({"scope": ["Torch.add.0.forward"]}, "exactly two full entry names"),
        ({"scope": ["Torch.add.0.forward", "relu"]}, "scope[1]: entry name 'relu'"),
        ({"names": [""]}, "list[0] ''"),
        ({"names": "relu"}, "not one string"),
        ({"data_mode": ["all", "forward"]}, "'all' must be alone"),
        ({"data_mode": ["fwd"]}, "data_mode ['fwd']"),
        ({"data_mode": []}, "non-empty list"),
    ],
)
def test_bad_arguments_raise_naming_field_and_value(kwargs, message):
    with pytest.raises(ValueError) as error:
        Selector(**kwargs)
    assert message in str(error.value)


def test_wants_rejects_an_unknown_part():
    with pytest.raises(ValueError, match="part 'kwargs'"):
        Selector().wants("Torch.add.0.forward", "kwargs")
