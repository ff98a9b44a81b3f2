"""``msprobe graph``: the model's module tree from a dump, coloured by precision errors.

Build mode draws one dump's hierarchy; compare mode pairs two dumps' nodes through the compare
pipeline and gives each node a precision index. Output: msprobe 1.1.1's ``.vis`` document (for its
TensorBoard plugin) and a self-contained HTML view of the same graph. See ``docs/graph.md``.
"""

from msprobe.core.graph.run import Written, run_graph

__all__ = ["Written", "run_graph"]
