"""Energon's ``megatron.energon.fork_hook``: callbacks run around ``os.fork`` (so around every forked
DataLoader or pool worker) for as long as whoever registered them lives.

Three registries — before the fork, after it in the parent, after it in the child — are wired to
:func:`os.register_at_fork` once, when this module is first imported.  Each holds its callables
*weakly* (a bound method through :class:`weakref.WeakMethod`, so it lasts as long as its object, not
as long as the temporary bound method) unless registered with ``make_persistent=True``; a callback
whose owner is collected leaves its registry at once.  :class:`ForkMixin` and
:class:`DataclassForkMixin` register an object's ``__before_fork__``, ``__after_in_parent_fork__`` and
``__after_in_child_fork__`` where its class overrides them.

Where datareel differs: two methods of one object may share a registry (Energon keeps only the last
one of an object); a method bound to a false-valued object (an empty container) is held by its object
like any other method (Energon holds that bound method itself, which dies at once); a callable that
cannot be held weakly raises :class:`~datareel.errors.OptionError` naming ``make_persistent=True``
(Energon: ``weakref``'s ``TypeError``), and so does a built-in bound method such as ``[].append``,
which a weak registry would drop at once.
"""

from __future__ import annotations

import dataclasses
import os
import types
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ..errors import OptionError


class _Strong:
    """A registry entry that keeps its callable alive (``make_persistent=True``)."""

    __slots__ = ("target",)

    def __init__(self, target: Callable[..., Any]) -> None:
        self.target = target

    def __call__(self) -> Callable[..., Any]:
        return self.target


class WeakCallbacks:
    """Callables run in the order they were added by :meth:`run`; each is dropped when it (or, for a bound
    method, its object) is collected.  Adding the same callable (or the same method of the same object)
    again replaces its entry.  ``_hooks`` maps each entry's key to a function that returns the callable,
    or ``None`` once it is gone."""

    def __init__(self) -> None:
        self._hooks: dict[Hashable, Callable[[], Callable[..., Any] | None]] = {}

    def add_hook(self, callable: Callable[..., Any], make_persistent: bool = False) -> None:
        """Run ``callable`` on every :meth:`run` while it lives (always, with ``make_persistent=True``)."""
        if isinstance(callable, types.MethodType):  # held through its object, not the bound method
            key: Hashable = (id(callable.__self__), id(callable.__func__))
        else:
            key = id(callable)
            owner = getattr(callable, "__self__", None)
            if not make_persistent and owner is not None and not isinstance(owner, types.ModuleType):
                raise OptionError(
                    f"{callable!r} is a built-in method bound to a {type(owner).__name__} object: a weak "
                    f"registry would drop it at once (nothing else holds that bound method); wrap it in a "
                    f"function or a method of an object that lives as long as needed, or pass make_persistent=True"
                )
        if make_persistent:
            self._hooks[key] = _Strong(callable)
            return
        gone = self._forget(key)
        try:
            if isinstance(callable, types.MethodType):
                self._hooks[key] = weakref.WeakMethod(callable, gone)
            else:
                self._hooks[key] = weakref.ref(callable, gone)
        except TypeError:
            raise OptionError(
                f"{callable!r} cannot be held by a weak reference (an object whose class has __slots__ needs "
                f"'__weakref__' among them); add it, or pass make_persistent=True to keep the callable for the "
                f"life of the process"
            ) from None

    def _forget(self, key: Hashable) -> Callable[[weakref.ref[Any]], None]:
        """The callback that removes entry ``key`` when its referent dies (only if it is still that entry:
        the key may have been registered again since)."""
        registry = weakref.ref(self)  # the registry may die first: nothing to remove then

        def gone(ref: weakref.ref[Any]) -> None:
            live = registry()
            if live is not None and live._hooks.get(key) is ref:
                del live._hooks[key]

        return gone

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Call every live callback with ``args`` and ``kwargs``."""
        for entry in list(self._hooks.values()):  # a callback may be collected (and removed) meanwhile
            target = entry()
            if target is not None:
                target(*args, **kwargs)


_before_fork_hooks = WeakCallbacks()
_after_in_parent_fork_hooks = WeakCallbacks()
_after_in_child_fork_hooks = WeakCallbacks()


def before_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Call ``callable`` in the parent just before each ``os.fork`` (weakly held unless ``make_persistent``)."""
    _before_fork_hooks.add_hook(callable, make_persistent)


def after_in_parent_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Call ``callable`` in the parent just after each ``os.fork`` (weakly held unless ``make_persistent``)."""
    _after_in_parent_fork_hooks.add_hook(callable, make_persistent)


def after_in_child_fork_hook(callable: Callable[[], None], make_persistent: bool = False) -> None:
    """Call ``callable`` in each new child of ``os.fork`` (weakly held unless ``make_persistent``)."""
    _after_in_child_fork_hooks.add_hook(callable, make_persistent)


_HOOK_METHODS = (
    ("__before_fork__", before_fork_hook),
    ("__after_in_child_fork__", after_in_child_fork_hook),
    ("__after_in_parent_fork__", after_in_parent_fork_hook),
)


def _register_overrides(obj: Any, base: type) -> None:
    """Register each fork method of ``obj`` that its class overrides (``base``'s own do nothing)."""
    for name, register in _HOOK_METHODS:
        if getattr(type(obj), name) is not getattr(base, name):
            register(getattr(obj, name))


class ForkMixin:
    """Base class whose instances get ``__before_fork__``, ``__after_in_parent_fork__`` and
    ``__after_in_child_fork__`` called around every fork while they live (the ones the subclass
    overrides; registered when ``__init__`` ends)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__post_init__()

    def __post_init__(self) -> None:
        _register_overrides(self, ForkMixin)

    def __before_fork__(self) -> None:
        """Runs in the parent just before a fork."""

    def __after_in_parent_fork__(self) -> None:
        """Runs in the parent just after a fork."""

    def __after_in_child_fork__(self) -> None:
        """Runs in the new child just after a fork."""


@dataclasses.dataclass
class DataclassForkMixin:
    """:class:`ForkMixin` for dataclasses: the hooks are registered in ``__post_init__`` (a subclass that
    defines its own ``__post_init__`` calls ``super().__post_init__()``)."""

    def __post_init__(self) -> None:
        _register_overrides(self, DataclassForkMixin)

    def __before_fork__(self) -> None:
        """Runs in the parent just before a fork."""

    def __after_in_parent_fork__(self) -> None:
        """Runs in the parent just after a fork."""

    def __after_in_child_fork__(self) -> None:
        """Runs in the new child just after a fork."""


if hasattr(os, "register_at_fork"):  # POSIX only; elsewhere there is no fork to hook
    os.register_at_fork(
        before=_before_fork_hooks.run,
        after_in_parent=_after_in_parent_fork_hooks.run,
        after_in_child=_after_in_child_fork_hooks.run,
    )


__all__ = [
    "DataclassForkMixin",
    "ForkMixin",
    "WeakCallbacks",
    "after_in_child_fork_hook",
    "after_in_parent_fork_hook",
    "before_fork_hook",
]
