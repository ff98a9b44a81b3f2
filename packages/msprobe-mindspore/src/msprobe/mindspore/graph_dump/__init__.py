"""MindSpore static graph (GRAPH_MODE, ``jit``) at level L2 through MindSpore's own kernel dump
(docs/mindspore/dump.md#static-graph-level-l2-graph_mode-jit).

msprobe writes MindSpore's dump configuration and points ``MINDSPORE_DUMP_CONFIG`` at it before the graph
compiles (:mod:`.config`); MindSpore writes one file per kernel tensor; after each step msprobe moves those
files into ``step{N}/rank{R}/`` (:mod:`.kernel_files`) and, by task, summarises them into ``statistic.csv``
(:mod:`.statistics`) or looks for the first non-finite kernel output (:mod:`.overflow`).
:class:`GraphDumpSession` drives it from the debugger's ``start``/``stop``/``step``.
"""

from msprobe.mindspore.graph_dump.session import GraphDumpSession

__all__ = ["GraphDumpSession"]
