"""Activation checkpointing adds nothing to a dump: a checkpointed run and a plain run of the same model on
the same input write the same entries, in the same order, with the same numbers (docs/pytorch/dump.md,
"Activation checkpointing").

The recomputation during backward fires module hooks (both modes) and, with ``use_reentrant=True``, makes
the API calls whose backward a plain run records: it must write no forward entry, move no counter, and
with ``use_reentrant=True`` its backward must be captured under the original forward calls' names.
Models: a hand-written one calling ``torch.utils.checkpoint.checkpoint`` on its blocks (also nested in one
more checkpoint), and LLaMA and T5 from ``transformers`` configs with ``gradient_checkpointing_enable()``;
tensor parallelism inside a checkpoint on two ranks.

The one field allowed to differ is ``requires_grad`` of tensors made inside a reentrant checkpoint's
forward: PyTorch runs that forward under ``no_grad``, so those outputs really do not require grad there.
T5 computes differently when checkpointing (its cross-attention's zero ``position_bias`` requires grad
then), so its plain run takes the same code path with a checkpoint function that only calls the layer.
With ``use_reentrant=True`` PyTorch itself sums T5's encoder-output gradient in another order (see
``test_t5_reentrant_gradients_differ_without_msprobe``), so those backward statistics agree to float32
rounding, not bit for bit; every other number is compared exactly.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_models import dump_one_step, train_steps

from msprobe.pytorch import PrecisionDebugger

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

LEVELS = ("L0", "L1", "mix")
MODES = (True, False)  # use_reentrant


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(8, 16), nn.Linear(16, 8), nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.fc2(torch.relu(self.fc1(x))))


class Net(nn.Module):
    """Two residual blocks, each checkpointed when ``reentrant`` is not None; with ``nested``, the two
    checkpointed blocks run inside one more checkpoint of the same mode."""

    def __init__(self, reentrant: bool | None, nested: bool = False) -> None:
        super().__init__()
        self.reentrant, self.nested = reentrant, nested
        self.inp = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 2)

    def _blocks(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) if self.reentrant is None else checkpoint(block, x, use_reentrant=self.reentrant)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        if self.nested and self.reentrant is not None:
            x = checkpoint(self._blocks, x, use_reentrant=self.reentrant)
        else:
            x = self._blocks(x)
        return self.head(x)


def _net(reentrant: bool | None, nested: bool = False) -> tuple[nn.Module, Callable]:
    torch.manual_seed(0)
    model = Net(reentrant, nested)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    return model, lambda m: m(x).pow(2).mean()


def _t5(reentrant: bool | None) -> tuple[nn.Module, Callable]:
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0, attn_implementation="eager",
    ))
    if reentrant is None:
        _checkpointing_without_recomputation(model)
    else:
        _train_checkpointed(model, reentrant)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 64, (2, 6), generator=gen)
    labels = torch.randint(1, 64, (2, 5), generator=gen)
    return model, lambda m: m(input_ids=ids, labels=labels).loss


def _llama(reentrant: bool | None) -> tuple[nn.Module, Callable]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager", use_cache=False,
    ))
    _train_checkpointed(model, reentrant)
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    return model, lambda m: m(input_ids=ids, labels=ids).loss


def _train_checkpointed(model: nn.Module, reentrant: bool | None) -> None:
    model.train()
    if reentrant is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers 5 renames it
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})


def _run_through(function: Callable, *args):
    """A checkpoint function that only calls the layer: nothing is dropped, nothing recomputed."""
    return function(*args)


def _checkpointing_without_recomputation(model: nn.Module) -> None:
    """T5's plain run: its code takes the checkpointing branch (T5 computes differently there: the
    cross-attention's zero ``position_bias`` requires grad, so its backward entries exist), but the layers
    are only called, through transformers' own ``_gradient_checkpointing_func`` hook."""
    _train_checkpointed(model, True)
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False):
            module._gradient_checkpointing_func = _run_through


MODELS = {"net": _net, "nested": functools.partial(_net, nested=True), "llama": _llama, "t5": _t5}


def _dump(build: Callable, reentrant: bool | None, level: str, out: Path) -> tuple[dict, dict]:
    model, loss_of = build(reentrant)
    rank_dir = dump_one_step(model, loss_of, out, task="statistics", level=level)
    data = json.loads((rank_dir / "dump.json").read_text())["data"]
    construct = json.loads((rank_dir / "construct.json").read_text())
    return data, construct


def _without_requires_grad(value):
    if isinstance(value, dict):
        return {k: _without_requires_grad(v) for k, v in value.items() if k != "requires_grad"}
    if isinstance(value, list):
        return [_without_requires_grad(v) for v in value]
    return value


def _requires_grad_flags(value, path=""):
    """(path, requires_grad) of every tensor record in an entry."""
    if isinstance(value, dict):
        if "requires_grad" in value:
            yield path, value["requires_grad"]
        for k, v in value.items():
            yield from _requires_grad_flags(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _requires_grad_flags(v, f"{path}[{i}]")


def _numbers(value, path=""):
    """(path, number) of every float in an entry: its statistics."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(value, float):
        yield path, value


# A reentrant checkpoint nested in another runs its forward under no_grad, and PyTorch says so.
NESTED_WARNING = "ignore:None of the inputs have requires_grad:UserWarning"


@pytest.mark.filterwarnings(NESTED_WARNING)
@pytest.mark.parametrize(("model", "level", "reentrant"), [
    pytest.param(model, level, reentrant, id=f"{model}-{level}-reentrant={reentrant}")
    for model in MODELS for level in LEVELS for reentrant in MODES
])
def test_checkpointed_dump_equals_plain_dump(model: str, level: str, reentrant: bool, tmp_path: Path) -> None:
    plain, plain_construct = _dump(MODELS[model], None, level, tmp_path / "plain")
    ckpt, ckpt_construct = _dump(MODELS[model], reentrant, level, tmp_path / "ckpt")

    assert list(ckpt) == list(plain)  # same entries, same order: nothing added, nothing lost, same counters
    assert any(".backward" in name for name in plain) and any(".forward" in name for name in plain)
    assert ckpt_construct == plain_construct  # same parents, forward and backward
    rounded = model == "t5" and reentrant  # PyTorch's own summation order (see the module docstring)
    for name, entry in plain.items():
        recorded = ckpt[name]
        if rounded and name in T5_BIAS_MAKERS:  # see test_t5_reentrant_bias_gradients_of_the_checkpointed_block
            entry, recorded = _without_bias_gradients(entry), _without_bias_gradients(recorded)
        got, want = _without_requires_grad(recorded), _without_requires_grad(entry)
        if rounded and (".backward" in name or ".parameters_grad." in name):  # gradients: PyTorch's summation order
            assert [p for p, _ in _numbers(got)] == [p for p, _ in _numbers(want)], name
            for (where, a), (_, b) in zip(_numbers(got), _numbers(want), strict=True):
                assert a == pytest.approx(b, rel=1e-5, abs=1e-9), (name, where)
        else:  # the recomputation ran on the same inputs and weights, on the CPU: the same numbers
            assert got == want, name
        flags = list(_requires_grad_flags(entry))
        ckpt_flags = list(_requires_grad_flags(recorded))
        assert [p for p, _ in ckpt_flags] == [p for p, _ in flags], name
        for (where, was), (_, now) in zip(flags, ckpt_flags, strict=True):
            if now != was:  # only a reentrant checkpoint's forward runs under no_grad
                assert reentrant and ".forward" in name, (name, where)
                assert (was, now) == (True, False), (name, where)


# The backward entries of T5's checkpointed blocks that return a position_bias they made themselves: the
# gradients of those outputs (``input[1:]``) are not the same quantity with use_reentrant=True (see below).
T5_BIAS_MAKERS = ("Module.encoder.block.0.T5Block.backward.0", "Module.decoder.block.0.T5Block.backward.0")


def _without_bias_gradients(entry: dict) -> dict:
    return {**entry, "input": entry["input"][:1]}


@pytest.mark.xfail(strict=True, reason="a reentrant checkpoint puts its own node between a block and the "
                   "uses of its outputs (docs/pytorch/dump.md, Activation checkpointing)")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_t5_reentrant_bias_gradients_of_the_checkpointed_block(level: str, tmp_path: Path) -> None:
    """What cannot align: T5's first block makes ``position_bias`` (the cross-attention's zero bias a leaf
    that requires grad, the self-attention's from an embedding), uses it inside and returns it. In a plain
    run the gradient watched on that output is the tensor's whole gradient, the block's own use included,
    and a leaf has none watched; behind a reentrant checkpoint the output is the checkpoint Function's,
    another tensor with its own node, whose gradient holds only the uses after the block."""
    plain, _ = _dump(_t5, None, level, tmp_path / "plain")
    ckpt, _ = _dump(_t5, True, level, tmp_path / "ckpt")
    for name in T5_BIAS_MAKERS:
        assert _without_requires_grad(ckpt[name]["input"][1:]) == _without_requires_grad(plain[name]["input"][1:])


def test_t5_reentrant_gradients_differ_without_msprobe() -> None:
    """Why T5's reentrant backward statistics are compared to float32 rounding: without msprobe, its
    reentrant checkpointed run gives the decoder the plain run's gradients bit for bit, but the encoder
    (which gets the gradient of its output summed over the decoder's checkpointed blocks) only to rounding."""

    def gradients(reentrant: bool | None) -> dict[str, torch.Tensor]:
        model, loss_of = _t5(reentrant)
        loss_of(model).backward()
        return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}

    plain, ckpt = gradients(None), gradients(True)
    assert plain.keys() == ckpt.keys()
    differ = {name for name in plain if not torch.equal(plain[name], ckpt[name])}
    assert differ and all(name.startswith(("encoder.", "shared.")) for name in differ)
    for name in differ:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-8)


@pytest.mark.filterwarnings(NESTED_WARNING)
@pytest.mark.parametrize("reentrant", MODES, ids=lambda r: f"reentrant={r}")
@pytest.mark.parametrize("model", ["net", "nested", "t5"])
def test_checkpointed_training_numbers_unchanged(model: str, reentrant: bool, tmp_path: Path) -> None:
    """Two AdamW steps of the checkpointed model, with the debugger (mix, every step) and without: the
    losses, gradients and parameters are bit-identical."""

    def run(debugger: PrecisionDebugger | None):
        net, loss_of = MODELS[model](reentrant)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
        return train_steps(net, optimizer, lambda: None, lambda m, _batch: loss_of(m), debugger, steps=2)

    bare = run(None)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), task="statistics", level="mix", step=[0, 1])
    observed = run(debugger)
    debugger.finish()
    for want, got in zip(bare, observed, strict=True):
        for a, b in zip(want, got, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
    assert (tmp_path / "step1" / "rank" / "dump.json").is_file()


# ---- tensor parallelism inside a checkpoint: two ranks, one torchrun ----------------------------------------
TP_RUNS = {"plain": None, "reentrant": True, "non_reentrant": False}
TP_MODELS = ("dtensor", "all_reduce")  # torch's ColwiseParallel/RowwiseParallel; a Megatron-style all_reduce


@pytest.fixture(scope="module")
def tensor_parallel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tp")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("run", ["reentrant", "non_reentrant"])
@pytest.mark.parametrize("model", TP_MODELS)
def test_tensor_parallel_checkpointed_dump_equals_plain_dump(tensor_parallel: Path, model: str, run: str) -> None:
    """Tensor-parallel layers inside checkpoints: the recomputation's calls and collectives (``dist.all_reduce``
    in an autograd Function, as Megatron's row-parallel layer has it) are not recorded again, and each
    rank's dump is its plain run's."""
    def data(name: str, rank: int) -> dict:
        path = tensor_parallel / f"{model}_{name}" / "step0" / f"rank{rank}" / "dump.json"
        return json.loads(path.read_text())["data"]

    for rank in (0, 1):
        plain, ckpt = data("plain", rank), data(run, rank)
        assert list(ckpt) == list(plain)
        assert any(".backward" in name for name in plain)
        assert any(name.startswith("Distributed.all_reduce.") for name in plain) == (model == "all_reduce")
        for name, entry in plain.items():
            assert _without_requires_grad(ckpt[name]) == _without_requires_grad(entry), (rank, name)


def _squared_mean(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).mean()


def _tensor_parallel_dumps(out: Path) -> None:
    """Under torchrun: one step of each of TP_MODELS with its parts checkpointed as TP_RUNS says, dumped at
    mix. ``dtensor``: the block of ``scripts/tp_dump.py``, attention and MLP each in a checkpoint;
    ``all_reduce``: an MLP sharded by hand whose output is summed by ``dist.all_reduce``."""
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).parent / "scripts"))
    from tp_dump import Block, parallelize

    def part(reentrant: bool | None, function: Callable, x: torch.Tensor) -> torch.Tensor:
        return function(x) if reentrant is None else checkpoint(function, x, use_reentrant=reentrant)

    class CheckpointedBlock(Block):
        def __init__(self, reentrant: bool | None) -> None:
            super().__init__()
            self.reentrant = reentrant
            parallelize(self)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + part(self.reentrant, lambda h: self.attn(self.norm1(h)), x)
            return x + part(self.reentrant, lambda h: self.mlp(self.norm2(h)), x)

    class SumOverRanks(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: torch.Tensor) -> torch.Tensor:
            x = x.clone()
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
            return grad

    class AllReduceMlp(nn.Module):
        def __init__(self, reentrant: bool | None) -> None:
            super().__init__()
            self.reentrant = reentrant
            self.norm, self.fc1, self.fc2 = nn.LayerNorm(16), nn.Linear(16, 16), nn.Linear(16, 16, bias=False)

        def _sharded(self, h: torch.Tensor) -> torch.Tensor:
            return SumOverRanks.apply(self.fc2(torch.relu(self.fc1(self.norm(h)))))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + part(self.reentrant, self._sharded, x)

    dist.init_process_group("gloo")
    models = {"dtensor": CheckpointedBlock, "all_reduce": AllReduceMlp}
    for model_name in TP_MODELS:
        for name, reentrant in TP_RUNS.items():
            torch.manual_seed(0 + dist.get_rank() * (model_name == "all_reduce"))  # hand-made shards differ
            model = models[model_name](reentrant)
            # reentrant checkpoints need an input that requires grad
            x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
            dump_one_step(model, functools.partial(_squared_mean, x=x), out / f"{model_name}_{name}",
                          task="statistics", level="mix")
    dist.destroy_process_group()


if __name__ == "__main__":
    _tensor_parallel_dumps(Path(sys.argv[1]))
