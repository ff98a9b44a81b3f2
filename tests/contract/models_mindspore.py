"""MindSpore cells the training contracts run: the shapes that once broke them, and library models.

A cell that reads its input twice (RMSNorm's shape) while that input also feeds a residual add is where
a backward capture that puts identity nodes into the graph changes the order in which gradients are
summed (``Cell.register_backward_hook`` did, one ULP after two Adam steps); a dropout that passes its
input through (p=0) and a residual add are where a capture that kept a call's arguments held a step's
activations (docs/pytorch/dump.md#backward-entries).
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops


class _RMSNorm(nn.Cell):
    """As LLaMA ports write it: the input read twice, in float32."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = ms.Parameter(ops.ones(dim, ms.float32), name="weight")

    def construct(self, x):
        variance = x.astype(ms.float32).pow(2).mean(-1, keep_dims=True)
        return self.weight * (x * ops.rsqrt(variance + 1e-6)).astype(x.dtype)


class _Residual(nn.Cell):
    """``inner(h) + h * scale`` with ``h = first(x)``: ``inner``'s input also feeds the residual add."""

    def __init__(self, first: nn.Cell, inner: nn.Cell, scale: float = 1.0) -> None:
        super().__init__()
        self.first, self.inner, self.scale = first, inner, scale

    def construct(self, x):
        h = self.first(x)
        return self.inner(h) + h * self.scale


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


def _reads_twice() -> nn.Cell:
    return _Residual(nn.Dense(64, 64), nn.SequentialCell([_RMSNorm(64), nn.Dense(64, 64)]), 3.7)


def _residual_dropout() -> nn.Cell:
    """Three blocks of Dense, a dropout that passes its input through (p=0), ReLU and a residual add."""
    blocks = [_Residual(nn.Identity(), nn.SequentialCell([nn.Dense(16, 16), nn.Dropout(p=0.0), nn.ReLU()]))
              for _ in range(3)]
    return nn.SequentialCell([*blocks, nn.Dense(16, 4)])


def _mindcv_vit() -> nn.Cell:
    from mindcv.models.vit import VisionTransformer

    return VisionTransformer(image_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def _mindcv_resnet() -> nn.Cell:
    from mindcv.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5)


MODELS = {  # name → (build, input shape, library it needs)
    "reads_twice": (_reads_twice, (16, 64), None),
    "llama_block": (_LlamaBlock, (2, 8, 16), None),
    "residual_dropout": (_residual_dropout, (8, 16), None),
    "mindcv_vit": (_mindcv_vit, (2, 3, 16, 16), "mindcv"),
    "mindcv_resnet": (_mindcv_resnet, (2, 3, 16, 16), "mindcv"),
}
