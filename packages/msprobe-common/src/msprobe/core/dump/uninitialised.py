"""APIs whose output is uninitialised memory (``empty``, ``empty_like``, ``new_empty``...), in both frameworks.

Such an output holds whatever the allocator left there, so two runs with bit-identical losses and gradients
record different values for it. The dump marks each such output tensor with the member ``"uninitialised":
true`` (a member msprobe 1.1.1's readers ignore), so compare, the graph and attribution know it without a
list of names, and run_ut does not replay them. Why and what compare does with them:
docs/compare.md#uninitialised-values.
"""

from __future__ import annotations

from msprobe.core.lifecycle.naming import FORWARD, parse_name

# bare API names: ``Tensor.new_empty``, ``Mint.empty_like``, aten's overload ``empty.memory_format``
UNINITIALISED_APIS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
MEMBER = "uninitialised"  # the dump.json member of a tensor value that holds uninitialised memory


def is_uninitialising(api: str) -> bool:
    """``api`` (``empty_like``, ``Tensor.new_empty``, an aten overload ``empty.memory_format``) returns
    uninitialised memory."""
    return api.split(".")[-1] in UNINITIALISED_APIS or api.split(".")[0] in UNINITIALISED_APIS


def outputs_uninitialised(entry: str) -> bool:
    """The entry (``Torch.empty_like.0.forward``) is the forward call of such an API: its outputs are
    uninitialised memory. Module entries and names that do not parse are not."""
    try:
        parsed = parse_name(entry)
    except ValueError:
        return False
    return not parsed.is_module and parsed.direction == FORWARD and is_uninitialising(parsed.api)
