"""What flows down a metadataset walk (:class:`Scope`: where a node is, and what its outer entries give it) and
what a reader hooks into it (:class:`Visitor`; :class:`Passive` does nothing at every node)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ...errors import DatasetError
from ...plan.over_epochs import check_multiplier, combine

T = TypeVar("T")


@dataclass(frozen=True)
class Written:
    """One ``subset`` as written, with where it was written and whether on a leaf (``path`` / ``join``)."""

    spec: Any
    yaml: Any
    where: str
    leaf: bool


@dataclass(frozen=True)
class Scope:
    """Where a node is and what its outer entries give it."""

    yaml: Any  # the metadataset file holding the node
    where: str  # the node's place in it: ``splits.train.blend[0]``
    split: str  # the split part read (a nested metadataset's entry may name another: ``split_part``)
    subflavors: dict[str, Any] = field(default_factory=dict)  # outer over inner
    multiplier: int | None = 1  # the caller's, read
    multipliers: tuple[tuple[Any, str], ...] = ()  # each entry's as written, with its place: outermost first
    subsets: tuple[Written, ...] = ()  # innermost first
    parent: str | None = None  # the kind of list holding the node (``blend``, ...); None for a split's own
    files: tuple[str, ...] = ()  # the splits of files being walked (walk.split_key), outermost first

    @property
    def place(self) -> str:
        """``FILE: WHERE``, how messages name the node."""
        return f"{self.yaml}: {self.where}"

    def combined(self, read: Callable[[Any, str], int | None] | None = None) -> int | None:
        """The ``shuffle_over_epochs_multiplier`` of the node: the caller's and every entry's down to it, each
        read by ``read(value, place)`` (default :func:`yaml_multiplier`), combined by Energon's rule."""
        out = self.multiplier
        for value, place in self.multipliers:
            out = combine(out, (read or yaml_multiplier)(value, place))
        return out

    def part(self, node: dict) -> str:
        """The split part an entry reads: its ``split_part`` (a string; ``null`` or empty inherits, as Energon)
        or this one."""
        value = node.get("split_part")
        if value is None or value == "":
            return self.split
        if not isinstance(value, str):
            raise DatasetError(f"{self.place}.split_part={value!r} must be a non-empty string")
        return value


class Visitor(Protocol[T]):
    """What a reader makes of each node of a walk (``scope``: the node's, its own values applied)."""

    def enter(self, node: dict, scope: Scope) -> None:
        """Checks of a mapping's keys, before the walk reads any of them (``scope``: outer values only)."""

    def dataset(self, node: dict, target: Any, scope: Scope) -> T:
        """An entry naming a dataset at ``target`` (or, when the walk does not follow them, a metadataset)."""

    def metadataset(self, node: dict, target: Any, scope: Scope) -> None:
        """Checks of an entry naming a metadataset at ``target``, before the walk follows it."""

    def join(self, node: dict, scope: Scope) -> T:
        """A ``join`` entry (its datasets are the reader's to open)."""

    def blend(self, node: dict, kind: str, children: list[T], scope: Scope) -> T:
        """A ``blend`` / ``blend_epochized`` entry, its items already walked (in order)."""


class Passive:
    """A visitor whose every hook does nothing and makes nothing (``None``): a reader that looks at some kinds
    of node only overrides those."""

    def enter(self, node: dict, scope: Scope) -> None:
        pass

    def dataset(self, node: dict, target: Any, scope: Scope) -> Any:
        return None

    def metadataset(self, node: dict, target: Any, scope: Scope) -> None:
        pass

    def join(self, node: dict, scope: Scope) -> Any:
        return None

    def blend(self, node: dict, kind: str, children: list[Any], scope: Scope) -> Any:
        return None


def yaml_multiplier(value: Any, place: str) -> int | None:
    """A metadataset's ``shuffle_over_epochs_multiplier``, as Energon reads it (``Optional[int]``: ``true`` is 1,
    every float refused)."""
    if value is True:
        return 1
    try:
        return check_multiplier(value)
    except ValueError as exc:
        raise DatasetError(f"{place}.{exc}") from None
