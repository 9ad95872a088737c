"""The contract between the reel and the rest: descriptors, steps and the :class:`Reel` protocol.

A reel kind (plain, packed, later stages) is one class implementing
:class:`Reel`.  The loader and the sampler only ever call these methods: they
never ask which kind of reel they hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..plan.layout import Layout
from .cursor import Cursor


@dataclass(frozen=True)
class Descriptor:
    """One rank's micro-batch: ``step`` and, per sample, reel position, source and index.

    positions: int64[k], source_ids: int32[k], indices: int64[k].  With packing,
    ``pack_sizes`` (int64[p], summing to k) cuts the samples into packs,
    ``packed_positions`` (int64[p]) numbers the packs in the packed reel and
    ``truncate`` (bool[k]) marks samples longer than ``max_length``.  In a windowed stage
    ``outputs`` (int64[k]) says which output of each position's encoder is meant, and
    ``packed_positions`` numbers the stage's outputs (packs, or single outputs when
    ``pack_sizes`` is ``None``).
    """

    step: int
    positions: np.ndarray
    source_ids: np.ndarray
    indices: np.ndarray
    pack_sizes: np.ndarray | None = None
    packed_positions: np.ndarray | None = None
    truncate: np.ndarray | None = None
    outputs: np.ndarray | None = None


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

    def length(self) -> int | None:
        """Positions (packs) in one ``repeat=False`` pass; ``None`` when endless."""
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
