"""Pairing the entries of two dumps, then the rows of each pair: like a text diff within one framework
(:mod:`.entries`), in PyTorch's terms for a MindSpore dump against a PyTorch one (:mod:`.cross_framework`,
after the MindSpore -> PyTorch translation tables of :mod:`.framework_map`, which MindSpore's run_ut uses too).

The second room of the pipeline: it imports only :mod:`msprobe.core.compare.read`.
"""

from msprobe.core.compare.align.cross_framework import CrossFramework, cross_framework
from msprobe.core.compare.align.entries import RowPair, align_entries, entry_mapping, pair_rows
from msprobe.core.compare.align.framework_map import FrameworkMap, builtin, torch_api_for, torch_suffix_for

__all__ = [
    "CrossFramework", "FrameworkMap", "RowPair", "align_entries", "builtin", "cross_framework", "entry_mapping",
    "pair_rows", "torch_api_for", "torch_suffix_for",
]
