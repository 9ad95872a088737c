"""The contract between the reel and the rest: descriptors, steps and the :class:`Reel` protocol.

A reel kind (plain, or a :class:`~.window.WindowReel` over any window planner) is one class
implementing :class:`Reel`.  The loader and the sampler only ever call these methods: they never ask
which kind of reel they hold.  A :class:`Descriptor` is what crosses to a worker: one rank's units of
one micro-step, each a pack or a single sample (see :mod:`.units`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..plan.layout import Layout
from .cursor import Cursor

_DERIVED = np.zeros(0, dtype=np.int64)
"""The default of a descriptor's unit fields: derived from the members (one unit per member)."""


def _derived() -> np.ndarray:
    return _DERIVED


@dataclass(frozen=True, eq=False)
class Descriptor:
    """One rank's micro-batch: ``step`` and its units, in order, their members back to back.

    Members: ``positions`` int64[k] (input reel positions), ``source_ids`` int32[k], ``indices`` int64[k],
    ``outputs`` int64[k] (which output of the member's first stage: ``0`` unless a stage planned a
    generator's outputs) and ``truncate`` bool[k] (cut to ``max_length`` before packing).  Units:
    ``units`` int64[u] (each unit's reel position: what ``__positions__`` reports and what keys a pack's
    randomness), ``sizes`` int64[u] (members per unit, summing to k) and ``packs`` bool[u] (a pack for
    ``pack_selected_samples``, else its one member is the unit).  ``planned``: the members' first-stage
    outputs were planned (see :class:`~.units.Units`).

    ``Descriptor(step, positions, source_ids, indices)`` is a plain micro-batch: one unit per sample, at its
    own position; it pickles as those three arrays alone.
    """

    step: int
    positions: np.ndarray
    source_ids: np.ndarray
    indices: np.ndarray
    units: np.ndarray = field(default_factory=_derived)
    sizes: np.ndarray = field(default_factory=_derived)
    packs: np.ndarray = field(default_factory=_derived)
    outputs: np.ndarray = field(default_factory=_derived)
    truncate: np.ndarray = field(default_factory=_derived)
    planned: bool = False

    def __post_init__(self) -> None:
        k = len(self.positions)
        plain = self.units is _DERIVED
        defaults: dict[str, Callable[[], np.ndarray]] = {
            "units": lambda: self.positions,
            "sizes": lambda: np.ones(len(self.units), dtype=np.int64),
            "packs": lambda: np.zeros(len(self.units), dtype=bool),
            "outputs": lambda: np.zeros(k, dtype=np.int64),
            "truncate": lambda: np.zeros(k, dtype=bool),
        }
        for name, make in defaults.items():
            if getattr(self, name) is _DERIVED:
                object.__setattr__(self, name, make())
        object.__setattr__(self, "_plain", plain and not self.planned)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._plain:  # type: ignore[attr-defined]  # set in __post_init__
            return (Descriptor, (self.step, self.positions, self.source_ids, self.indices))
        return (Descriptor, tuple(getattr(self, f.name) for f in fields(self)))


class Step(NamedTuple):
    """One micro-step of one rank: its descriptor (``None``: an empty share of a final, partial
    step) and the cursor once every rank has consumed the step."""

    descriptor: Descriptor | None
    after: Cursor


class Reel(Protocol):
    """A stream of micro-steps over a reel, restartable at any cursor."""

    def start(self) -> Cursor:
        """The cursor of a fresh loader."""
        ...

    def stream(self, start: Cursor, layout: Layout, rank: int) -> Iterator[Step]:
        """``rank``'s micro-steps from ``start`` on (a checked cursor); a finite pass stops at its end."""
        ...

    def check(self, cursor: Cursor, layout: Layout) -> None:
        """Refuse a restored cursor this reel and layout cannot continue from (plans one window at most)."""
        ...

    def spec(self) -> dict[str, Any]:
        """Spec fields this reel adds to the state (what a restore must find unchanged)."""
        ...

    def length(self, cursor: Cursor | None = None) -> int | None:
        """Positions (packs) in one ``repeat=False`` pass; ``None`` when endless.  ``cursor``: the length as the
        pass is served from there (a window reel restored with another encoder class counts the units before the
        cursor as handed out and the rest as planned now)."""
        ...

    def at_end(self, cursor: Cursor) -> bool:
        """Whether ``cursor`` is the end of a ``repeat=False`` pass (O(1): plans nothing)."""
        ...

    def bound(self) -> int | None:
        """An upper bound on the positions (packs) of one ``repeat=False`` pass, known without planning;
        ``None`` when endless or unknown."""
        ...

    @property
    def dropped(self) -> int:
        """Samples left out by the reel so far (packing's ``over_length="drop"``)."""
        ...

    def point(self, cursor: Cursor, skip: int) -> tuple[int, int] | None:
        """Where the unit ``skip`` units after ``cursor`` lies: ``(window, offset)`` in a window reel,
        ``None`` where a position alone names a unit (the plain reel).  With :meth:`descriptor` it makes a
        micro-batch again from its address (``restore_sample``)."""
        ...

    def descriptor(self, step: int, start: int, stop: int, point: tuple[int, int] | None) -> Descriptor:
        """The descriptor of the units at reel positions ``[start, stop)`` of micro-step ``step``, the first
        at ``point`` (:meth:`point`); plans the windows they lie in, no others."""
        ...
