"""The reel: reel position -> ``(leaf source, sample index)``, a pure function of spec and seed.

This is invariant I1 in code: a plan is a tree of nodes that read nothing but
their own fields (sizes, shares, keys, seed, shuffle) and the counters they
are given.

- :class:`LeafNode`: a source's own counter ``j`` -> epoch ``j // n`` and that
  epoch's keyed permutation (see :mod:`.epochs`).
- :class:`SplitNode`: a two-way low-discrepancy split (see :mod:`.split`);
  a weighted mix of ``k`` children is a balanced binary tree of these.
- :class:`ConcatNode`: children one after the other, per pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .epochs import source_indices
from .rng import name_key
from .split import split


@dataclass(frozen=True, kw_only=True)
class LeafNode:
    leaf: int
    size: int
    key: int
    seed: int
    shuffle: bool

    def resolve(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """j: int64[k] -> (leaf ids int32[k], sample indices int64[k])."""
        idx = source_indices(j, self.size, seed=self.seed, source_key=self.key, shuffle=self.shuffle)
        return np.full(j.shape, self.leaf, dtype=np.int32), idx


@dataclass(frozen=True, kw_only=True)
class SplitNode:
    """Sends the share ``a / b`` of its positions to ``left``, the rest to ``right``."""

    left: Node
    right: Node
    a: int
    b: int

    def resolve(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        goes_left, local = split(q, self.a, self.b)  # (k,), (k,)
        leaf = np.empty(q.shape, dtype=np.int32)
        index = np.empty(q.shape, dtype=np.int64)
        for child, mask in ((self.left, goes_left), (self.right, ~goes_left)):
            if mask.any():
                leaf[mask], index[mask] = child.resolve(local[mask])
        return leaf, index


@dataclass(frozen=True, kw_only=True)
class ConcatNode:
    """Each pass reads every child once, in order; pass ``e`` of child ``c`` is its counters
    ``[e n_c, (e + 1) n_c)``."""

    children: tuple[Node, ...]
    sizes: tuple[int, ...]

    def resolve(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = np.cumsum((0,) + self.sizes)  # (c + 1,)
        epoch, offset = np.divmod(j, starts[-1])  # (k,), (k,)
        which = np.searchsorted(starts, offset, side="right") - 1  # (k,)
        leaf = np.empty(j.shape, dtype=np.int32)
        index = np.empty(j.shape, dtype=np.int64)
        for c, child in enumerate(self.children):
            mask = which == c
            if mask.any():
                local = epoch[mask] * self.sizes[c] + offset[mask] - starts[c]
                leaf[mask], index[mask] = child.resolve(local)
        return leaf, index


Node = LeafNode | SplitNode | ConcatNode


@dataclass(frozen=True, kw_only=True)
class ReelPlan:
    """The order of a whole reel: ``root`` and the length of one pass (``None``: endless)."""

    root: Node
    epoch_length: int | None

    def resolve(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """positions: int64[k] -> (leaf ids int32[k], sample indices int64[k])."""
        return self.root.resolve(np.asarray(positions, dtype=np.int64))

    @classmethod
    def single(cls, *, size: int, name: str, seed: int, shuffle: bool) -> ReelPlan:
        """The reel of one source: its epochs back to back."""
        return cls(root=LeafNode(leaf=0, size=size, key=name_key(name), seed=seed, shuffle=shuffle), epoch_length=size)
