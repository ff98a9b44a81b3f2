"""A step's activations are freed when the step is over, whether or not the debugger watched it.

A call's backward capture lives from its forward to its backward, hooked onto the gradient graph; had it
kept the call's arguments, a cycle through the framework's own graph nodes (a call whose output is its
input — dropout with ``p=0`` — or that writes into its input — ``ReLU(inplace=True)``) or a loss the user
keeps after its backward would hold a step's activations past the step (docs/pytorch/dump.md#backward-entries).
"""

from __future__ import annotations

import gc
import weakref

import pytest
from sides import NOT_TRAINED, load_side
from training import debugger, run

MODES = (None, "statistics-L1", "statistics-mix", "statistics-L0", "overflow_check-L1", "free_benchmark-backward")
MODELS = {"pytorch": ("gpt2", "inplace_resnet"), "mindspore": ("residual_dropout",)}
CASES = [pytest.param(framework, name, mode, keep, id=f"{framework}-{name}-{mode or 'bare'}-losses {kept}")
         for framework, names in MODELS.items() for name in names for mode in MODES
         for keep, kept in ((False, "dropped"), (True, "kept"))]
CASES.append(pytest.param("numpy", None, None, False, id="numpy", marks=pytest.mark.skip(reason=NOT_TRAINED)))
STEPS = 3


@pytest.mark.parametrize(("framework", "name", "mode", "keep_losses"), CASES)
def test_no_module_output_outlives_its_step(framework, name, mode, keep_losses, tmp_path):
    side = load_side(framework)
    training = side.training(name)
    refs: list[weakref.ref] = []
    watched = side.watch_outputs(training.model, refs)
    observer = None if mode is None else debugger(side, mode, tmp_path / "dump")
    losses = run(training, observer, STEPS)
    if observer is not None:
        observer.finish()
    if not keep_losses:
        losses.clear()
    gc.collect()
    assert len(refs) >= STEPS * watched  # every module's output of every step was seen
    # What a kept loss legitimately holds: itself (a module's output), nothing upstream.
    assert [t for ref in refs if (t := ref()) is not None and not any(t is loss for loss in losses)] == []
