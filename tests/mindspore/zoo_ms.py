"""MindSpore architectures nobody here wrote, built with tiny configs and random weights (no download).

Which library: ``mindcv==0.3.0`` is the only MindSpore model library that installs beside MindSpore 2.10
without changing anything installed (pure Python; numpy, PyYAML and tqdm are already there). The others
do not: mindnlp 0.5.1 requires ``mindspore<=2.7.0`` (0.4.1 pins pytest 7.2 and tokenizers 0.19),
mindformers 2.1.0 requires ``mindspore~=2.11`` (2.0.0, the 2.10 release, pins transformers 4.57.1 and
needs hyper-parallel, mindpet...), mindone 0.5.0 pins transformers 4.57.1.

- ``resnet``: mindcv's ``ResNet`` with its ``BasicBlock`` (conv-BN-ReLU, residual add, max pool), the
  ResNet-18 widths with one block per stage;
- ``vit``: mindcv's ``VisionTransformer`` (patch conv, class token, pre-LN blocks of mindcv's attention
  and GELU MLP), the encoder of the zoo;
- ``lstm``: MindSpore's own ``nn.LSTM`` (two layers) under an embedding and a dense head;
- ``llama``: mindcv has no LLaMA and no library that has one installs here, so this one is a faithful
  port of transformers' ``modeling_llama.py`` (``LlamaForCausalLM``, eager attention) to MindSpore ops,
  class for class and line for line: RMSNorm reading its input twice in float32, rotary embeddings with
  ``rotate_half``, grouped-query attention with ``repeat_kv``, the SwiGLU MLP, residual adds, a shifted
  causal-LM loss. It is the shape in which LLaMA ports are written.

Every model is trained by :func:`train` (Adam, ``ms.value_and_grad``, PyNative) and dumped for one step
by :func:`dump_one_step`, fp32 or under MindSpore's own mixed precision in fp16 (:func:`half`; fp16, not
bf16: MindSpore's CPU has no bf16 Conv2D kernel).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common.initializer import Normal

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # shared checks (importlib mode)
import layers  # noqa: E402

Batch = tuple[Tensor, ...]


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Cell]
    batch: Callable[[np.random.Generator], Batch]
    loss: Callable[[nn.Cell, Batch], Tensor]


# --- LLaMA: transformers' modeling_llama.py, ported ------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 96
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


class LlamaRMSNorm(nn.Cell):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = ms.Parameter(ops.ones(hidden_size, ms.float32), name="weight")
        self.variance_epsilon = eps

    def construct(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.astype(ms.float32)
        variance = hidden_states.pow(2).mean(-1, keep_dims=True)
        hidden_states = hidden_states * ops.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.astype(input_dtype)


class LlamaRotaryEmbedding(nn.Cell):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        dim = config.hidden_size // config.num_attention_heads
        self.inv_freq = Tensor(1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)))

    def construct(self, x, position_ids):
        freqs = position_ids[..., None].astype(ms.float32) * self.inv_freq
        emb = ops.cat((freqs, freqs), axis=-1)
        return ops.cos(emb).astype(x.dtype), ops.sin(emb).astype(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return ops.cat((-x2, x1), axis=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def _linear(n_in: int, n_out: int) -> nn.Dense:
    return nn.Dense(n_in, n_out, weight_init=Normal(0.02), has_bias=False)


class LlamaMLP(nn.Cell):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = _linear(config.hidden_size, config.intermediate_size)
        self.up_proj = _linear(config.hidden_size, config.intermediate_size)
        self.down_proj = _linear(config.intermediate_size, config.hidden_size)
        self.act_fn = nn.SiLU()

    def construct(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def repeat_kv(hidden_states, n_rep: int):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = ops.broadcast_to(hidden_states[:, :, None, :, :], (batch, num_key_value_heads, n_rep, slen,
                                                                         head_dim))
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Cell):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = _linear(config.hidden_size, config.num_attention_heads * self.head_dim)
        self.k_proj = _linear(config.hidden_size, config.num_key_value_heads * self.head_dim)
        self.v_proj = _linear(config.hidden_size, config.num_key_value_heads * self.head_dim)
        self.o_proj = _linear(config.num_attention_heads * self.head_dim, config.hidden_size)

    def construct(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).swapaxes(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).swapaxes(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).swapaxes(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = ops.matmul(query_states, key_states.swapaxes(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask.astype(attn_weights.dtype)
        attn_weights = ops.softmax(attn_weights.astype(ms.float32), axis=-1).astype(query_states.dtype)
        attn_output = ops.matmul(attn_weights, value_states).swapaxes(1, 2)
        return self.o_proj(attn_output.reshape(*input_shape, -1))


class LlamaDecoderLayer(nn.Cell):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def construct(self, hidden_states, attention_mask, position_embeddings):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaModel(nn.Cell):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, embedding_table=Normal(0.02))
        self.layers = nn.CellList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def construct(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        length = input_ids.shape[1]
        position_ids = ops.arange(length)[None]
        # transformers' causal mask: the dtype's minimum above the diagonal (fp16's, so that fp16 holds it)
        causal_mask = Tensor(np.triu(np.full((length, length), np.finfo(np.float16).min, np.float32), 1))
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, position_embeddings)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Cell):
    def __init__(self, config: LlamaConfig | None = None) -> None:
        super().__init__()
        config = config or LlamaConfig()
        self.model = LlamaModel(config)
        self.lm_head = _linear(config.hidden_size, config.vocab_size)

    def construct(self, input_ids):
        return self.lm_head(self.model(input_ids))


def _causal_lm_loss(model: nn.Cell, batch: Batch) -> Tensor:
    ids, labels = batch
    logits = model(ids).astype(ms.float32)
    return ops.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels)


def _shifted_tokens(rng: np.random.Generator) -> Batch:
    """Token ids and the next-token labels, shifted in numpy: MindSpore 2.10's CPU ``cross_entropy`` of two
    sliced views (``logits[:, :-1]``, ``ids[:, 1:]``) is not deterministic (two results 1 ULP apart over
    repeated identical calls), which would make every bit-identity check flaky; one view is."""
    ids = rng.integers(0, 96, (2, 12)).astype(np.int32)
    return Tensor(ids), Tensor(ids[:, 1:].reshape(-1))


# --- the others: the libraries' own cells ----------------------------------------------------------------

def _resnet() -> nn.Cell:
    from mindcv.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=5)


def _vit() -> nn.Cell:
    from mindcv.models.vit import VisionTransformer

    return VisionTransformer(image_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


class LSTMClassifier(nn.Cell):
    """MindSpore's ``nn.LSTM`` between an embedding and a dense head: the last step's hidden state."""

    def __init__(self, vocab: int = 96, hidden: int = 16, labels: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Dense(hidden, labels)

    def construct(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out[:, -1])


def _labelled_tokens(rng: np.random.Generator) -> Batch:
    return Tensor(rng.integers(0, 96, (2, 12)).astype(np.int32)), Tensor(rng.integers(0, 5, (2,)).astype(np.int32))


def _images(rng: np.random.Generator, size: int = 16) -> Batch:
    return (Tensor(rng.standard_normal((2, 3, size, size)).astype(np.float32)),
            Tensor(rng.integers(0, 5, (2,)).astype(np.int32)))


def _classifier_loss(model: nn.Cell, batch: Batch) -> Tensor:
    inputs, labels = batch
    return ops.cross_entropy(model(inputs).astype(ms.float32), labels)


ZOO = [
    ZooModel("llama", LlamaForCausalLM, _shifted_tokens, _causal_lm_loss),
    ZooModel("vit", _vit, _images, _classifier_loss),
    ZooModel("resnet", _resnet, _images, _classifier_loss),
    ZooModel("lstm", LSTMClassifier, _labelled_tokens, _classifier_loss),
]

# For the first-divergence checks: a weight in the middle of each model. Not the LSTM: MindSpore 2.10's CPU
# LSTM gradients in fp16 are wrong (zeros or stray values, varying between identical runs), and its amp
# cannot keep nn.LSTM in fp32 (the cast of a black-listed cell's output fails on LSTM's tuple).
FAULTED = {
    "llama": "model.layers.1.mlp.down_proj",
    "vit": "blocks.1.mlp.fc1",
    "resnet": "layer3.0.conv2",
}


def build(spec: ZooModel, seed: int = 0) -> nn.Cell:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(seed)
    model = spec.build()
    model.set_train(True)
    return model


def train(spec: ZooModel, debugger=None, steps: int = 2, seed: int = 0) -> tuple[list, list]:
    """``steps`` Adam steps of a zoo model, each framed by start/stop/step as the docs show; returns
    (losses, parameters and last gradients) as numpy arrays."""
    model = build(spec, seed)
    optimizer = nn.Adam(model.trainable_params(), 1e-2)
    rng = np.random.default_rng(seed + 1)
    losses, grads = [], ()
    for _ in range(steps):
        batch = spec.batch(rng)
        grad_fn = ms.value_and_grad(lambda *b: spec.loss(model, b), None, optimizer.parameters)
        if debugger is not None:
            debugger.start(model)
        loss, grads = grad_fn(*batch)
        optimizer(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy())
    if debugger is not None:
        debugger.finish()
    return losses, [p.asnumpy() for p in model.trainable_params()] + [g.asnumpy() for g in grads]


def cell(model: nn.Cell, path: str) -> nn.Cell:
    return dict(model.cells_and_names())[path]


def half(model: nn.Cell) -> nn.Cell:
    """fp16 mixed precision as MindSpore users set it: every cell in fp16 except those of MindSpore's black
    list (BatchNorm, LayerNorm) and the RMSNorm (the LayerNorm of LLaMA: in fp16 the gradient of its
    ``rsqrt`` overflows at init, x^-1.5 past 65504 for a variance of 4e-4)."""
    return ms.amp.custom_mixed_precision(model, black_list=ms.amp.get_black_list() + [LlamaRMSNorm])


def dump_one_step(spec: ZooModel, out: Path, task: str, level: str, fp16: bool = False,
                  fault: str | None = None) -> tuple[Path, np.ndarray]:
    """One forward and backward of ``spec`` dumped into ``out`` (step 0). ``fp16``: under :func:`half`;
    ``fault``: the cell whose weight is scaled by 1.05 first.
    Returns the rank directory and the loss."""
    from msprobe.mindspore import PrecisionDebugger

    model = build(spec)
    if fault is not None:
        weight = cell(model, fault).weight
        weight.set_data(weight * 1.05)
    if fp16:
        model = half(model)
    batch = spec.batch(np.random.default_rng(1))
    grad_fn = ms.value_and_grad(lambda *b: spec.loss(model, b), None, model.trainable_params())
    debugger = PrecisionDebugger(dump_path=str(out), task=task, level=level, step=[0])
    debugger.start(model)
    loss, _ = grad_fn(*batch)
    debugger.stop()
    debugger.step()
    debugger.finish()
    return out / "step0" / "rank", loss.asnumpy()


def in_layer(entry: str | None, layer: str, construct: dict) -> bool:
    """The entry is the faulted layer's cell (forward or backward), or nested inside it."""
    return layers.in_layer(entry, layer, construct, "Cell")
