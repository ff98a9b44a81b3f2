"""The user's own functions recorded as APIs: ``PrecisionDebugger.register_custom_api(module, api_name, prefix)``
(docs/pytorch/dump.md#custom-apis).

A framework sees its built-in APIs through its own interception (PyTorch's function mode, MindSpore's
replaced attributes); a function of the user's or of a third-party library is seen only when it is named
here. The registry is framework-free and process-wide, as the call is (a classmethod in 26.2.0, made
before or after the debugger): it holds which attribute of which owner is an API and under which name;
each framework's interceptor puts its wrapper on those attributes while it collects and takes it off
again, so an idle debugger leaves the user's functions as they are.

Names follow the API grammar (docs/dump_format.md#entry-names): ``{prefix}.{api_name}.{count}.forward``.
The prefix defaults to the owner's ``__name__`` as in 26.2.0; a dotted one (``mylib.ops``) gives the same
name as 26.2.0's (``mylib.ops.fn.0.forward``), read as prefix ``mylib`` and API ``ops.fn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msprobe.core.lifecycle.naming import MODULE_KINDS
from msprobe.core.services.log import logger

DEFAULT_PREFIX = "Custom"  # an owner without ``__name__`` (an instance)


@dataclass(frozen=True)
class CustomApi:
    """``owner.attr`` is recorded as ``{prefix}.{api}``."""

    owner: Any
    attr: str
    prefix: str
    api: str


def _checked_name(owner: Any, api_name: object, prefix: object) -> tuple[str, str]:
    if not isinstance(api_name, str) or not api_name.isidentifier():
        raise ValueError(f"register_custom_api: api_name {api_name!r} is not an attribute name (a Python identifier)")
    if not callable(getattr(owner, api_name, None)):
        raise ValueError(f"register_custom_api: {_owner_text(owner)} has no callable attribute {api_name!r}")
    if prefix is None or prefix == "":
        prefix = getattr(owner, "__name__", None) or DEFAULT_PREFIX
    if not isinstance(prefix, str) or any(not part for part in prefix.split(".")):
        raise ValueError(f"register_custom_api: prefix {prefix!r} is not a non-empty string without empty "
                         "dot-separated parts")
    head, _, rest = prefix.partition(".")
    if head in MODULE_KINDS:
        raise ValueError(f"register_custom_api: prefix {prefix!r} is taken by module entries; allowed: any other "
                         "name, e.g. the library's")
    return head, f"{rest}.{api_name}" if rest else api_name


def _owner_text(owner: Any) -> str:
    return getattr(owner, "__name__", None) or type(owner).__name__


class CustomApiRegistry:
    """The registered functions, in registration order; an interceptor reads them at each ``start()``."""

    def __init__(self) -> None:
        self._apis: dict[tuple[int, str], CustomApi] = {}
        # custom_op_namespaces of the running debugger's config (PyTorch's ``torch.ops.<ns>``), set at its construction
        self.namespaces: tuple[str, ...] = ()
        self._names: frozenset[tuple[str, str]] = frozenset()  # (prefix, api) of the registered functions

    def register(self, owner: Any, api_name: str, prefix: str | None = None) -> str:
        """Record ``owner.api_name`` from the next ``start()``; returns its name's ``Prefix.api``. A second
        registration of the same attribute renames it."""
        prefix_part, api = _checked_name(owner, api_name, prefix)
        self._apis[(id(owner), api_name)] = CustomApi(owner, api_name, prefix_part, api)
        self._names = frozenset((a.prefix, a.api) for a in self._apis.values())
        logger.info(f"custom API registered: {_owner_text(owner)}.{api_name} is recorded as {prefix_part}.{api}")
        return f"{prefix_part}.{api}"

    def restore(self, owner: Any, api_name: str) -> None:
        """Stop recording ``owner.api_name`` (from the next ``start()``); an attribute never registered is
        an error naming it."""
        if self._apis.pop((id(owner), api_name), None) is None:
            raise ValueError(f"restore_custom_api: {_owner_text(owner)}.{api_name} was not registered")
        self._names = frozenset((a.prefix, a.api) for a in self._apis.values())

    def is_custom(self, prefix: str, api: str) -> bool:
        """Whether ``prefix.api`` names a custom API: an operator of a configured namespace or a registered
        function (risk_level keeps them at every level: the user asked for them by name)."""
        return prefix in self.namespaces or (prefix, api) in self._names

    def apis(self) -> tuple[CustomApi, ...]:
        return tuple(self._apis.values())


CUSTOM_APIS = CustomApiRegistry()
