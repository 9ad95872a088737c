"""Units: what a window planner returns and what a descriptor carries, as a few numpy arrays.

A *unit* is one position of a window reel: either a pack (its members go to the task encoder's
``pack_selected_samples``) or a single sample or encoder output (its one member is the unit).  A
*member* is one input of the reel: its input position, source and index, which output of its first
stage it stands for (``0`` unless the stage plans a generator's outputs) and whether it is cut to
``max_length`` before packing.  Units are kept as flat arrays (members back to back, ``sizes`` cutting
them), so a window's units pickle as seven arrays however many units it holds, and a micro-step's
share is a slice, never a list of Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DatareelError


@dataclass(frozen=True, eq=False)
class Units:
    """Units in order, their members back to back.

    sizes: int64[u] (each >= 1) members per unit; packs: bool[u] whether a unit is a pack;
    positions: int64[k] (k = sizes.sum()) each member's input reel position; source_ids: int32[k];
    indices: int64[k]; outputs: int64[k] which output of the member's first stage; truncate: bool[k].
    ``planned``: the planner ran the encoder's first stage on the members (a worker must find the same
    outputs, and a failure there is not substituted: the plan counted on the sample).
    """

    sizes: np.ndarray
    packs: np.ndarray
    positions: np.ndarray
    source_ids: np.ndarray
    indices: np.ndarray
    outputs: np.ndarray
    truncate: np.ndarray
    planned: bool = False
    starts: np.ndarray = field(init=False, repr=False)  # int64[u + 1]: unit j is members [starts[j], starts[j+1])

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64))

    def __len__(self) -> int:
        return len(self.sizes)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "starts"}  # derived again on arrival

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.__post_init__()

    @classmethod
    def of(
        cls,
        groups: Sequence[Sequence[int] | np.ndarray],
        positions: np.ndarray,
        source_ids: np.ndarray,
        indices: np.ndarray,
        *,
        outputs: np.ndarray | None = None,
        truncate: np.ndarray | None = None,
        packs: bool = True,
        planned: bool = False,
    ) -> Units:
        """Units from groups of row numbers into the member arrays (``positions`` int64[n], ``source_ids``
        int32[n], ``indices`` int64[n], and optionally ``outputs`` int64[n], ``truncate`` bool[n]): group
        ``j`` is unit ``j``, its members rows ``groups[j]`` in that order.  ``packs=False``: every group
        holds one row, and the unit is that sample (or output) itself."""
        sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))  # (u,)
        if (sizes < 1).any() or (not packs and (sizes != 1).any()):
            j = int(np.flatnonzero((sizes < 1) | ((sizes != 1) & (not packs)))[0])
            raise DatareelError(
                f"a window planner's unit {j} holds {int(sizes[j])} members; a pack holds at least one, and a "
                f"unit that is not a pack exactly one: return groups of row numbers of the window's inputs"
            )
        rows = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups]) if len(groups) else _EMPTY  # (k,)
        n = len(positions)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise DatareelError(f"a window planner's unit names row {int(rows.max())} of a window of {n} rows")
        return cls(
            sizes,
            np.full(len(sizes), packs, dtype=bool),
            np.asarray(positions, dtype=np.int64)[rows],
            np.asarray(source_ids, dtype=np.int32)[rows],
            np.asarray(indices, dtype=np.int64)[rows],
            np.zeros(len(rows), np.int64) if outputs is None else np.asarray(outputs, dtype=np.int64)[rows],
            np.zeros(len(rows), bool) if truncate is None else np.asarray(truncate, dtype=bool)[rows],
            planned,
        )

    def take(self, lo: int, hi: int) -> Units:
        """Units ``[lo, hi)``: a view of the arrays (members ``[starts[lo], starts[hi])``)."""
        a, b = int(self.starts[lo]), int(self.starts[hi])
        return Units(
            self.sizes[lo:hi], self.packs[lo:hi], self.positions[a:b], self.source_ids[a:b], self.indices[a:b],
            self.outputs[a:b], self.truncate[a:b], self.planned,
        )  # fmt: skip

    @staticmethod
    def concat(parts: Sequence[Units]) -> Units:
        """``parts`` back to back (at least one; all planned alike: they come from one planner)."""
        if len(parts) == 1:
            return parts[0]

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(part, name) for part in parts])

        return Units(
            cat("sizes"), cat("packs"), cat("positions"), cat("source_ids"), cat("indices"), cat("outputs"),
            cat("truncate"), parts[0].planned,
        )  # fmt: skip


_EMPTY = np.zeros(0, dtype=np.int64)
