"""Named tuples and dataclasses are written as objects of every field, a ``None`` one as ``null``
(docs/dump_format.md#values), as msprobe 1.1.1 and 26.2.0 write them: a transformers ``ModelOutput`` keeps its
unset fields, an LSTM's ``PackedSequence`` its field names. On real models, with the statistics checked against
float64 numpy and the training step bit for bit the same with msprobe on and off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from dump_json import fixture_maker, step_data, write_config
from torch import nn
from zoo import ZOO

from msprobe.pytorch import PrecisionDebugger

GPT2 = next(spec for spec in ZOO if spec.name == "gpt2")
TAGGER = fixture_maker("up262_tagger")  # an LSTM over packed sequences: a PackedSequence in and out


def _tagger_step(model: nn.Module) -> torch.Tensor:
    return TAGGER.train_step(model, TAGGER.build()[1])


def _gpt2_step(model: nn.Module) -> torch.Tensor:
    loss = GPT2.loss(model, GPT2.batch(torch.Generator().manual_seed(1)))
    loss.backward()
    return loss


def _one_step(build, step, watched: str, debugger=None):
    """One forward and backward from seed 0: (loss, gradients, the watched module's output)."""
    torch.manual_seed(0)
    model = build()
    seen = []
    model.get_submodule(watched).register_forward_hook(lambda module, args, output: seen.append(output))
    if debugger is not None:
        debugger.start(model=model)
    loss = step(model)
    if debugger is not None:
        debugger.stop()
        debugger.step()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}, seen[0]


def _stats64(tensor: torch.Tensor) -> tuple[float, float, float, float]:
    values = tensor.detach().numpy().astype(np.float64)
    return values.max(), values.min(), values.mean(), np.sqrt(np.sum(values * values))


def _assert_stats(record: dict, tensor: torch.Tensor) -> None:
    assert record["shape"] == list(tensor.shape)
    top, bottom, mean, norm = _stats64(tensor)
    assert (record["Max"], record["Min"]) == (top, bottom)
    rms = norm / np.sqrt(tensor.numel())  # float32 sums: a mean near 0 is judged against the tensor's scale
    assert record["Mean"] == pytest.approx(mean, rel=1e-6, abs=1e-6 * rms)
    assert record["Norm"] == pytest.approx(norm, rel=1e-6)


def _dumped_step(tmp_path, build, step, watched: str):
    bare = _one_step(build, step, watched)
    config = write_config(tmp_path, "dump", "statistics", "L0", {})
    observed = _one_step(build, step, watched, PrecisionDebugger(config_path=str(config)))
    assert torch.equal(bare[0], observed[0])  # the run's numbers, bit for bit
    assert [name for name, grad in bare[1].items() if not torch.equal(grad, observed[1][name])] == []
    return step_data(tmp_path / "dump", 0), observed[2]


def test_a_model_output_is_written_with_every_field(tmp_path):
    data, output = _dumped_step(tmp_path, GPT2.build, _gpt2_step, "transformer")
    (record,) = data["Module.transformer.GPT2Model.forward.0"]["output"]
    fields = [field.name for field in dataclasses.fields(output)]
    assert list(record) == fields and len(fields) > len(output.keys())  # the unset fields too
    assert all(record[name] is None for name in fields if getattr(output, name) is None)
    _assert_stats(record["last_hidden_state"], output.last_hidden_state)


def test_a_named_tuple_is_written_by_its_field_names(tmp_path):
    data, (packed, (hidden, cell)) = _dumped_step(tmp_path, lambda: TAGGER.build()[0], _tagger_step, "lstm")
    entry = data["Module.lstm.LSTM.forward.0"]
    assert list(entry["input_args"][0]) == list(packed._fields)  # data, batch_sizes, sorted/unsorted_indices
    written, state = entry["output"]
    assert list(written) == ["data", "batch_sizes", "sorted_indices", "unsorted_indices"]
    _assert_stats(written["data"], packed.data)
    _assert_stats(written["batch_sizes"], packed.batch_sizes)
    _assert_stats(state[0], hidden)
    _assert_stats(state[1], cell)
