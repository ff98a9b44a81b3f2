"""The one undo handle for everything msprobe installs in a framework: hooks, patched attributes, modes.

Every install function returns a :class:`Handle` (the model is ``torch.utils.hooks.RemovableHandle``):
``handle.remove()`` undoes what was installed, once — later calls do nothing — and ``with install(...):``
removes it when the block ends. A :class:`HandleGroup` collects several and removes them last-first, so
two patches of one attribute come off in the right order and the whole lot is undone by one call.
The framework's own hook handles (PyTorch's ``RemovableHandle``, MindSpore's ``HookHandle``) have the same
``remove()`` and join a group as they are. :func:`patch_attributes` (:func:`patch_attribute` for one) is
the one way msprobe replaces attributes it does not own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

_H = TypeVar("_H", bound="Handle")
_R = TypeVar("_R", bound="Removable")


class Removable(Protocol):
    """Anything undone by ``remove()``: a :class:`Handle`, or a framework's hook handle."""

    def remove(self) -> None: ...


class Handle:
    """Undoes one installation. ``remove()`` runs ``undo`` the first time only; ``Handle()`` undoes nothing."""

    __slots__ = ("_undo",)

    def __init__(self, undo: Callable[[], object] | None = None) -> None:
        self._undo = undo

    @property
    def active(self) -> bool:
        """Whether ``remove()`` still has something to undo."""
        return self._undo is not None

    def remove(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


class HandleGroup(Handle):
    """Several handles undone by one ``remove()``, the last added first.

    ``HandleGroup(install(x) for x in xs)`` is all or nothing: when one installation raises, those
    already made are removed before the error propagates. After ``remove()`` the group is empty and may
    be filled again (an interceptor's enable/disable cycle). An undo that raises does not stop the
    others: every handle is removed, then the first error is raised.
    """

    __slots__ = ("_handles",)

    def __init__(self, handles: Iterable[Removable] = ()) -> None:
        super().__init__()
        self._handles: list[Removable] = []
        try:
            for handle in handles:
                self._handles.append(handle)
        except BaseException:
            self.remove()
            raise

    @property
    def active(self) -> bool:
        return bool(self._handles)

    def add(self, handle: _R) -> _R:
        """Keep ``handle`` to be removed with the group; returns it."""
        self._handles.append(handle)
        return handle

    def remove(self) -> None:
        error: BaseException | None = None
        while self._handles:
            try:
                self._handles.pop().remove()
            except BaseException as exc:  # undo the rest before reporting
                error = error or exc
        if error is not None:
            raise error


_ABSENT = object()


def _saved(owner: Any, name: str) -> Any:
    return vars(owner).get(name, _ABSENT) if isinstance(owner, type) else getattr(owner, name)


def patch_attributes(
    patches: Sequence[tuple[Any, str, Any]], *, set_attr: Callable[[Any, str, Any], None] = setattr
) -> Handle:
    """``owner.name = value`` for each ``(owner, name, value)``, all undone exactly by one handle (the last
    patch first), or none: when one assignment raises, those already made are undone before the error
    propagates.

    On a class the class's own entry is saved as it is (a ``staticmethod`` stays one); where the class
    only inherited ``name`` the handle deletes the attribute again, so lookup reaches the base class as
    before. On anything else (a module, an instance) the current value is put back. ``set_attr`` replaces
    ``setattr`` where the owners' ``__setattr__`` must be bypassed (``object.__setattr__``).

    One handle and one list of saved values for the whole batch: an interceptor patches hundreds of
    attributes at every enable, and a handle each would feed the garbage collector at every step.
    """
    if not patches:
        return Handle()  # nothing to undo (a handle kept per step must not hold a closure per step)
    saved = [_saved(owner, name) for owner, name, _ in patches]

    def undo(count: int = len(patches)) -> None:
        for (owner, name, _), old in zip(reversed(patches[:count]), reversed(saved[:count])):
            if old is _ABSENT:
                delattr(owner, name)
            else:
                set_attr(owner, name, old)

    done = 0
    try:
        for owner, name, value in patches:
            set_attr(owner, name, value)
            done += 1
    except BaseException:
        undo(done)
        raise
    return Handle(undo)


def patch_attribute(
    owner: Any, name: str, value: Any, *, set_attr: Callable[[Any, str, Any], None] = setattr
) -> Handle:
    """``owner.name = value``, undone exactly by the handle (see :func:`patch_attributes`)."""
    return patch_attributes([(owner, name, value)], set_attr=set_attr)
