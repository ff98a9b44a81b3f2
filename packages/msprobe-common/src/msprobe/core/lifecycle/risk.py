"""``risk_level``: which API calls a dump keeps by how likely they are to change a value
(docs/config.md#risk_level-and-tensor_list).

Many calls of a step only move or make values without computing any: reshapes and views, casts,
concatenation, creating constant tensors. ``FOCUS`` leaves those out; ``CORE`` keeps only the calls where
precision problems are mostly born: matrix products, convolutions, normalisations, embeddings and attention.
A list of API kinds ``low_risk_apis`` in config.json adds to the shipped low-risk list. Modules (L0, mix) are
always kept, and ``scope`` or ``list``, when given, decide instead (as in msprobe 26.2.0).
"""

from __future__ import annotations

from collections.abc import Iterable

from msprobe.core.lifecycle.custom_apis import CUSTOM_APIS
from msprobe.core.lifecycle.naming import EntryName

RISK_LEVELS = ("CORE", "FOCUS", "ALL")

# API kinds (the name between prefix and count: ``Torch.matmul.0.forward`` is ``matmul``), both frameworks
CORE_APIS = frozenset({
    "matmul", "__matmul__", "bmm", "baddbmm", "baddbmm_", "mm", "mv", "addmm", "addmm_", "addmv", "addmv_", "addbmm",
    "addbmm_", "addr", "einsum", "tensordot", "linear", "bilinear", "dense", "batch_matmul", "BatchMatMul", "MatMul",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "Conv2D",
    "batch_norm", "instance_norm", "layer_norm", "group_norm", "rms_norm", "local_response_norm", "LayerNorm",
    "BatchNorm", "embedding", "embedding_bag", "Gather", "scaled_dot_product_attention",
    "multi_head_attention_forward", "flash_attention_score", "npu_fusion_attention", "softmax", "log_softmax",
    "cross_entropy", "nll_loss",
})
LOW_RISK_APIS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "ravel", "squeeze", "unsqueeze",
    "expand", "expand_as", "broadcast_to", "repeat", "repeat_interleave", "tile", "transpose", "permute", "t",
    "movedim", "moveaxis", "swapaxes", "swapdims", "contiguous", "chunk", "split", "split_with_sizes",
    "tensor_split", "unbind", "narrow", "stack", "cat", "concat", "concatenate", "hstack", "vstack", "dstack",
    "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool", "byte", "astype",
    "clone", "detach", "copy", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "linspace", "eye", "tril", "triu", "__getitem__", "size", "dim", "numel", "stride",
})


class RiskFilter:
    """Keeps an API call whose kind the level lets through; every module."""

    def __init__(self, level: str, low_risk: Iterable[str] = ()) -> None:
        if level not in RISK_LEVELS:
            raise ValueError(f"risk_level {level!r}: give one of {', '.join(RISK_LEVELS)}")
        self.level = level
        self.low_risk = LOW_RISK_APIS | frozenset(low_risk)

    def keeps(self, entry: EntryName) -> bool:
        if entry.is_module or self.level == "ALL" or CUSTOM_APIS.is_custom(entry.prefix, entry.api):
            return True
        if self.level == "CORE":
            return entry.api in CORE_APIS
        return entry.api not in self.low_risk
