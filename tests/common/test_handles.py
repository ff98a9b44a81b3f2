"""The one undo handle (``msprobe.core.services.handles``): idempotent remove, context manager, groups undone
last-first, all-or-nothing installs, and attribute patches restored exactly."""

from __future__ import annotations

import types

import pytest

from msprobe.core.services.handles import Handle, HandleGroup, patch_attribute, patch_attributes


class _Undo:
    """Counts the calls of an undo and logs them in a shared list."""

    def __init__(self, log: list[str] | None = None, name: str = "", error: Exception | None = None) -> None:
        self.calls = 0
        self._log, self._name, self._error = log, name, error

    def __call__(self) -> None:
        self.calls += 1
        if self._log is not None:
            self._log.append(self._name)
        if self._error is not None:
            raise self._error


def test_remove_undoes_once_and_later_calls_do_nothing():
    undo = _Undo()
    handle = Handle(undo)
    assert handle.active
    handle.remove()
    handle.remove()
    assert undo.calls == 1 and not handle.active
    Handle().remove()  # undoes nothing
    assert not Handle().active


def test_a_handle_is_a_context_manager_also_when_the_block_raises():
    undo = _Undo()
    with pytest.raises(KeyError):
        with Handle(undo) as handle:
            assert handle.active
            raise KeyError("boom")
    assert undo.calls == 1 and not handle.active


def test_a_failing_undo_is_not_retried():
    undo = _Undo(error=RuntimeError("undo failed"))
    handle = Handle(undo)
    with pytest.raises(RuntimeError, match="undo failed"):
        handle.remove()
    handle.remove()
    assert undo.calls == 1


def test_a_group_removes_last_first_and_can_be_filled_again():
    log: list[str] = []
    group = HandleGroup([Handle(_Undo(log, "a")), Handle(_Undo(log, "b"))])
    inner = group.add(Handle(_Undo(log, "c")))
    assert isinstance(inner, Handle) and group.active
    group.remove()
    assert log == ["c", "b", "a"] and not group.active
    group.remove()
    assert log == ["c", "b", "a"]
    group.add(Handle(_Undo(log, "d")))  # an interceptor's next enable
    with group:
        pass
    assert log == ["c", "b", "a", "d"]


def test_a_group_takes_any_object_with_remove_like_framework_hook_handles():
    removed = []
    foreign = types.SimpleNamespace(remove=lambda: removed.append("hook"))
    HandleGroup([foreign]).remove()
    assert removed == ["hook"]


def test_a_group_removes_everything_even_when_an_undo_raises_then_raises_the_first_error():
    log: list[str] = []
    group = HandleGroup([
        Handle(_Undo(log, "a")),
        Handle(_Undo(log, "b", RuntimeError("first"))),
        Handle(_Undo(log, "c", ValueError("second"))),
    ])
    with pytest.raises(ValueError, match="second"):
        group.remove()
    assert log == ["c", "b", "a"] and not group.active


def test_building_a_group_is_all_or_nothing():
    log: list[str] = []

    def installs():
        yield Handle(_Undo(log, "a"))
        yield Handle(_Undo(log, "b"))
        raise OSError("the third install failed")

    with pytest.raises(OSError, match="third"):
        HandleGroup(installs())
    assert log == ["b", "a"]  # what was installed before the failure is undone


class _Base:
    def inherited(self) -> str:
        return "base"


class _Owner(_Base):
    @staticmethod
    def own() -> str:
        return "own"


def test_patch_attribute_restores_a_class_attribute_exactly():
    descriptor = vars(_Owner)["own"]
    with patch_attribute(_Owner, "own", staticmethod(lambda: "patched")):
        assert _Owner.own() == "patched"
    assert vars(_Owner)["own"] is descriptor  # the staticmethod object itself, not the function behind it


def test_patch_attribute_deletes_again_what_a_class_only_inherited():
    handle = patch_attribute(_Owner, "inherited", lambda self: "patched")
    assert _Owner().inherited() == "patched" and "inherited" in vars(_Owner)
    handle.remove()
    assert "inherited" not in vars(_Owner) and _Owner().inherited() == "base"


def test_patch_attribute_on_a_module_and_stacked_patches():
    module = types.ModuleType("fake_dist")
    module.all_reduce = original = object()
    group = HandleGroup([patch_attribute(module, "all_reduce", "outer")])
    group.add(patch_attribute(module, "all_reduce", "inner"))
    assert module.all_reduce == "inner"
    group.remove()  # last first: the inner patch puts "outer" back, then the outer one the original
    assert module.all_reduce is original


def test_patch_attribute_with_a_setter_that_bypasses_the_owners_setattr():
    class Guarded:
        def __setattr__(self, name: str, value: object) -> None:
            raise AttributeError("read-only")

    guarded = Guarded()
    object.__setattr__(guarded, "matmul", "primitive")
    with patch_attribute(guarded, "matmul", "stand-in", set_attr=object.__setattr__):
        assert guarded.matmul == "stand-in"
    assert guarded.matmul == "primitive"


def test_patch_attributes_is_one_handle_for_a_batch_and_all_or_nothing():
    module = types.ModuleType("fake_ops")
    module.relu, module.gelu = "relu", "gelu"
    handle = patch_attributes([(module, "relu", "w1"), (_Owner, "inherited", "w2"), (module, "relu", "w3")])
    assert (module.relu, vars(_Owner)["inherited"]) == ("w3", "w2")
    handle.remove()
    handle.remove()
    assert module.relu == "relu" and "inherited" not in vars(_Owner)

    def refuse_gelu(owner: object, name: str, value: object) -> None:
        if name == "gelu" and value != "gelu":
            raise AttributeError("read-only")
        setattr(owner, name, value)

    with pytest.raises(AttributeError, match="read-only"):
        patch_attributes([(module, "relu", "w1"), (module, "gelu", "w2")], set_attr=refuse_gelu)
    assert (module.relu, module.gelu) == ("relu", "gelu")
