"""Real architectures nobody here wrote, built from their libraries' own configs with random weights.

``transformers`` builds LLaMA, GPT-2, BERT, ViT and ResNet from a config without any download
(``HF_HUB_OFFLINE=1``); torchvision is not used (its registry wheel cannot load its compiled part
beside the CPU torch here), so the ResNet with ``ReLU(inplace=True)`` — the shape of every torchvision
ResNet — is written out below, block for block.

Every model is tiny (a few thousand parameters) so that two AdamW steps take milliseconds, yet runs
the real library code: attention masks, rotary embeddings, residual adds, LayerNorm/RMSNorm, GELU,
BatchNorm, in-place ReLU.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch_models import dump_one_step as dump_model_step
from torch_models import train_steps

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # shared checks (importlib mode)
import layers  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

Batch = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]


def _tokens(gen: torch.Generator, vocab: int = 96, batch: int = 2, length: int = 12) -> Batch:
    ids = torch.randint(0, vocab, (batch, length), generator=gen)
    return (ids,)


def _images(gen: torch.Generator, size: int = 32, labels: int = 5) -> Batch:
    return torch.randn(2, 3, size, size, generator=gen), torch.randint(0, labels, (2,), generator=gen)


def _causal_lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    (ids,) = batch
    return model(input_ids=ids, labels=ids).loss


def _classifier_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    images, labels = batch
    out = model(images)
    logits = out.logits if hasattr(out, "logits") else out
    return nn.functional.cross_entropy(logits, labels)


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager",
    ))


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
    ))


def _bert() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    ))


def _masked_lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    (ids,) = batch
    return model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
        patch_size=8, num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    ))


def _hf_resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    return ResNetForImageClassification(ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=5,
    ))


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: conv-BN-ReLU(inplace)-conv-BN, ``out += identity``, ReLU."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class InplaceResNet(nn.Module):
    """A two-stage ResNet in torchvision's shape (stem conv-BN-ReLU(inplace)-maxpool, basic blocks)."""

    def __init__(self, labels: int = 5) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 5, 2, 2, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


ZOO = [
    ZooModel("llama", _llama, _tokens, _causal_lm_loss),
    ZooModel("gpt2", _gpt2, _tokens, _causal_lm_loss),
    ZooModel("bert", _bert, _tokens, _masked_lm_loss),
    ZooModel("vit", _vit, _images, _classifier_loss),
    ZooModel("hf_resnet", _hf_resnet, _images, _classifier_loss),
    ZooModel("inplace_resnet", InplaceResNet, _images, _classifier_loss),
]


def train(spec: ZooModel, debugger=None, steps: int = 2, seed: int = 0, autocast: torch.dtype | None = None):
    """``steps`` AdamW steps of a zoo model; returns (losses, parameters, last gradients)."""
    torch.manual_seed(seed)
    model = spec.build()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed + 1)
    return train_steps(model, optimizer, lambda: spec.batch(gen), spec.loss, debugger, steps, autocast)


FAULTED = {  # for the first-divergence checks: a weight in the middle of each model
    "llama": "model.layers.1.mlp.down_proj",
    "gpt2": "transformer.h.1.mlp.c_proj",
    "bert": "bert.encoder.layer.1.intermediate.dense",
    "vit": "vit.layers.1.mlp.fc1",
    "hf_resnet": "resnet.encoder.stages.1.layers.0.layer.1.convolution",
    "inplace_resnet": "layer2.conv2",
}


def dump_one_step(spec: ZooModel, out: Path, task: str, level: str, autocast: torch.dtype | None,
                  fault: str | None) -> Path:
    """One forward and backward of ``spec`` dumped into ``out``; ``fault``: a module whose weight is
    scaled by 1.05. Returns the rank directory."""
    torch.manual_seed(0)
    model = spec.build()
    batch = spec.batch(torch.Generator().manual_seed(1))
    return dump_model_step(model, lambda m: spec.loss(m, batch), out, task=task, level=level, autocast=autocast,
                           fault=fault)


def in_layer(entry: str | None, layer: str, construct: dict) -> bool:
    """The entry is the faulted layer's module (forward or backward), or nested inside it."""
    return layers.in_layer(entry, layer, construct, "Module")
