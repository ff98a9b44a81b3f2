"""MindSpore PyNative: training with the debugger on must be bit-identical to training without it.

A cell that reads its input twice (RMSNorm's shape) while the input also feeds a residual add is where a
backward capture that puts identity nodes into the graph changes the order in which gradients are
summed (``Cell.register_backward_hook`` did, one ULP after two Adam steps). The capture now only reads
the gradient graph (docs/mindspore/dump.md, "Backward entries"), so every level is exact: two Adam steps
of a LLaMA-style block written with ops, of a small net of that shape, and of mindcv's ViT and ResNet
(a library nobody here wrote) leave losses, gradients and parameters equal bit for bit.
"""

from __future__ import annotations

import functools

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from msprobe.mindspore import PrecisionDebugger


class _ReadsTwice(nn.Cell):
    def construct(self, x):
        return x * ops.rsqrt(ops.mean(x * x, -1, keep_dims=True) + 1e-6)


class _Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm, self.b = nn.Dense(64, 64), _ReadsTwice(), nn.Dense(64, 64)

    def construct(self, x):
        h = self.a(x)
        return self.b(self.norm(h)) + h * 3.7


class _RMSNorm(nn.Cell):
    """As LLaMA ports write it: the input read twice, in float32."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = ms.Parameter(ops.ones(dim, ms.float32), name="weight")

    def construct(self, x):
        variance = x.astype(ms.float32).pow(2).mean(-1, keep_dims=True)
        return self.weight * (x * ops.rsqrt(variance + 1e-6)).astype(x.dtype)


class _SwiGLU(nn.Cell):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Dense(dim, hidden, has_bias=False)
        self.up = nn.Dense(dim, hidden, has_bias=False)
        self.down = nn.Dense(hidden, dim, has_bias=False)

    def construct(self, x):
        return self.down(ops.silu(self.gate(x)) * self.up(x))


class _Attention(nn.Cell):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Dense(dim, 3 * dim, has_bias=False)
        self.out = nn.Dense(dim, dim, has_bias=False)

    def construct(self, x):
        b, t, d = x.shape
        q, k, v = ops.split(self.qkv(x), d, -1)
        q, k, v = (y.reshape(b, t, self.heads, -1).swapaxes(1, 2) for y in (q, k, v))
        scores = ops.matmul(q, k.swapaxes(-1, -2)) / float(np.sqrt(d // self.heads))
        mask = ms.Tensor(np.triu(np.full((t, t), -1e9, np.float32), 1))
        attn = ops.matmul(ops.softmax(scores + mask, -1), v)
        return self.out(attn.swapaxes(1, 2).reshape(b, t, d))


class _LlamaBlock(nn.Cell):
    """Pre-norm decoder layer: RMSNorm, causal attention, RMSNorm, SwiGLU MLP, two residual adds."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Dense(16, dim)
        self.attn_norm, self.attn = _RMSNorm(dim), _Attention(dim, heads)
        self.mlp_norm, self.mlp = _RMSNorm(dim), _SwiGLU(dim, 2 * dim)
        self.final_norm = _RMSNorm(dim)

    def construct(self, x):
        h = self.embed(x)
        h = h + self.attn(self.attn_norm(h))
        h = h + self.mlp(self.mlp_norm(h))
        return self.final_norm(h)


def _mindcv_vit() -> nn.Cell:
    from mindcv.models.vit import VisionTransformer

    return VisionTransformer(image_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def _mindcv_resnet() -> nn.Cell:
    from mindcv.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5)


def _rows(shape: tuple) -> ms.Tensor:
    return ms.Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


MODELS = {  # name → (build, input, library needed)
    "reads_twice": (_Net, (16, 64), None),
    "llama_block": (_LlamaBlock, (2, 8, 16), None),
    "mindcv_vit": (_mindcv_vit, (2, 3, 16, 16), "mindcv"),
    "mindcv_resnet": (_mindcv_resnet, (2, 3, 16, 16), "mindcv"),
}


def _train(name: str, debugger=None) -> list[np.ndarray]:
    """Two Adam steps of ``MODELS[name]``, framed as docs/mindspore/dump.md shows: losses, last
    gradients and parameters."""
    build, shape, _ = MODELS[name]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = build()
    net.set_train(True)
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    x = _rows(shape)
    grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, optimizer.parameters)
    losses, grads = [], ()
    for _ in range(2):
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(x)
        optimizer(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy())
    return losses + [g.asnumpy() for g in grads] + [p.asnumpy() for p in net.trainable_params()]


@functools.cache
def _plain(name: str) -> tuple[np.ndarray, ...]:
    return tuple(_train(name))


def _assert_bit_identical(plain: list, observed: list) -> None:
    assert len(plain) == len(observed)
    different = [i for i, (a, b) in enumerate(zip(plain, observed)) if not np.array_equal(a, b)]
    assert not different, f"{len(different)} of {len(plain)} arrays differ (losses, gradients, parameters)"


EVERY_LEVEL = [("statistics", "L0"), ("statistics", "L1"), ("statistics", "mix"), ("tensor", "mix")]
CASES = ([("reads_twice", *mode) for mode in EVERY_LEVEL] + [("llama_block", *mode) for mode in EVERY_LEVEL]
         + [("mindcv_vit", "statistics", "L0"), ("mindcv_vit", "statistics", "mix"),
            ("mindcv_resnet", "statistics", "mix")])  # tests/mindspore/zoo_ms.py trains more library models


@pytest.mark.parametrize(("name", "task", "level"), CASES, ids=["-".join(case) for case in CASES])
def test_two_adam_steps_are_bit_identical(tmp_path, name, task, level):
    library = MODELS[name][2]
    if library is not None:
        pytest.importorskip(library)
    plain = _plain(name)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task=task, level=level, step=[0, 1])
    observed = _train(name, debugger)
    _assert_bit_identical(plain, observed)
    dump = (tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text()
    assert ".backward" in dump  # the run was observed, backward included
