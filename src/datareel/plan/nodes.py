"""The reel: reel position -> ``(leaf source, sample index)``, a pure function of spec and seed.

This is invariant I1 in code: a plan is a tree of nodes that read nothing but
their own fields (sizes, shares, keys, seed, shuffle) and the counters they
are given.

- :class:`LeafNode`: a source's own counter ``j`` -> epoch ``j // n`` and that
  epoch's keyed permutation (see :mod:`.epochs`).
- :class:`SplitNode`: a two-way low-discrepancy split (see :mod:`.split`);
  a weighted mix of ``k`` children is a balanced binary tree of these.
- :class:`ConcatNode`: children one after the other, per pass.
- :class:`MixNode`: a tree of splits (nested mixes too) compiled into arrays and resolved in one
  vectorised pass, with all its leaves' shuffles in one pass (same results as the tree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .adopted import PrefixNode
from .blocks import BlockOrder, block_indices
from .epochs import LeafTable, source_indices
from .over_epochs import over_epochs_indices, pass_length
from .rng import name_key
from .split import FAST_LIMIT, split, split_each


@dataclass(frozen=True, kw_only=True)
class LeafNode:
    leaf: int
    size: int
    key: int
    seed: int
    shuffle: bool
    epochs: int = 1  # shuffled over this many epochs at once (-1: with replacement; see .over_epochs)
    blocks: BlockOrder | None = None  # the block (locality) shuffle's order of each epoch (see .blocks)

    @property
    def per_epoch(self) -> bool:
        """Whether each epoch is its own full permutation (or none): what :class:`LeafTable` resolves."""
        return self.blocks is None and (self.epochs == 1 or not self.shuffle)

    def resolve(self, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """j: int64[k] -> (leaf ids int32[k], sample indices int64[k])."""
        if self.blocks is not None:
            idx = block_indices(j, self.size, self.blocks, seed=self.seed, source_key=self.key)
        elif self.per_epoch:
            idx = source_indices(j, self.size, seed=self.seed, source_key=self.key, shuffle=self.shuffle)
        else:
            idx = over_epochs_indices(j, self.size, seed=self.seed, source_key=self.key, epochs=self.epochs)
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


TREE_FROM = 2048
"""Positions per terminal from which :class:`MixNode` resolves node by node (its per-node numpy calls are then
cheaper than the vectorised pass's per-position cost; measured crossover for 10 and 100 sources)."""


@dataclass(frozen=True, eq=False)
class MixNode:
    """A tree of :class:`SplitNode` (a weighted mix, nested mixes included) resolved level by level for all
    positions at once, and its source leaves in one pass: a few dozen numpy calls per call instead of a
    few per tree node (for calls of fewer than ``TREE_FROM`` positions per terminal, as the loader's are).
    Equal, position by position, to ``root.resolve``. Build with :func:`compile_mix`.

    Rows ``[0, s)`` of the tables are the splits: split ``i`` sends share ``a[i] / b[i]`` to row ``left[i]``,
    the rest to row ``right[i]`` (``turn = 2 (b - a)``). Row ``s + t`` is terminal ``t``: share 1/1 to itself,
    which leaves a counter as it is, so every position takes ``depth`` steps. Terminals are leaves (row
    ``leaf_row[t]`` of ``leaves``) or other nodes (concats, leaves shuffled over several epochs), resolved
    by their own ``resolve``.
    """

    root: SplitNode
    a: np.ndarray  # int64[s + t]
    b: np.ndarray  # int64[s + t]
    turn: np.ndarray  # int64[s + t]
    left: np.ndarray  # int64[s + t]
    right: np.ndarray  # int64[s + t]
    depth: int
    terminals: tuple[Node, ...]
    leaf_row: np.ndarray  # int64[t]: the terminal's row in ``leaves``, -1 for a terminal that is no leaf
    leaf_id: np.ndarray  # int32[t]: the terminal's leaf id (-1 for no leaf)
    leaves: LeafTable

    def resolve(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if q.size >= TREE_FROM * len(self.terminals):
            return self.root.resolve(q)  # many positions per terminal: node by node is cheaper per position
        node = np.zeros(q.shape, dtype=np.int64)  # (k,) each position's row: the root split first
        for _ in range(self.depth):
            goes_left, q = split_each(q, self.a[node], self.b[node], self.turn[node])
            node = np.where(goes_left, self.left[node], self.right[node])
        terminal = node - len(self.a) + len(self.terminals)  # (k,)
        row = self.leaf_row[terminal]  # (k,)
        leaf = self.leaf_id[terminal]  # (k,) int32
        if (row >= 0).all():  # the common case: every terminal a leaf
            return leaf, self.leaves.indices(q, row)
        index = np.empty(q.shape, dtype=np.int64)
        is_leaf = row >= 0
        index[is_leaf] = self.leaves.indices(q[is_leaf], row[is_leaf])
        for t in np.unique(terminal[~is_leaf]).tolist():
            mask = terminal == t
            leaf[mask], index[mask] = self.terminals[t].resolve(q[mask])
        return leaf, index


def compile_mix(root: SplitNode) -> SplitNode | MixNode:
    """The :class:`MixNode` of a split tree, nested mixes flattened into it; the tree itself where an
    exact share's denominator is too large for the vectorised arithmetic (``b > 2^30``)."""
    splits: list[tuple[SplitNode, int]] = []  # (split, its depth)
    terminals: list[Node] = []
    codes: list[tuple[int, int]] = []  # per split: its children, as split index or ~terminal index

    def visit(node: Node, depth: int) -> int:
        if isinstance(node, MixNode):
            node = node.root
        if isinstance(node, SplitNode):
            splits.append((node, depth))
            return len(splits) - 1
        terminals.append(node)
        return ~(len(terminals) - 1)

    visit(root, 0)
    for node, depth in splits:  # grows while visited: breadth first
        codes.append((visit(node.left, depth + 1), visit(node.right, depth + 1)))
    if max(node.b for node, _ in splits) > FAST_LIMIT:
        return root
    s = len(splits)
    rows = [c if c >= 0 else s + ~c for pair in codes for c in pair]  # children as table rows
    a = [n.a for n, _ in splits] + [1] * len(terminals)
    b = [n.b for n, _ in splits] + [1] * len(terminals)
    leaves = [t for t in terminals if isinstance(t, LeafNode) and t.per_epoch]  # others resolve themselves
    row_of = {id(t): r for r, t in enumerate(leaves)}
    return MixNode(
        root=root,
        a=np.array(a, dtype=np.int64),
        b=np.array(b, dtype=np.int64),
        turn=2 * (np.array(b, dtype=np.int64) - np.array(a, dtype=np.int64)),
        left=np.array(rows[0::2] + list(range(s, s + len(terminals))), dtype=np.int64),
        right=np.array(rows[1::2] + list(range(s, s + len(terminals))), dtype=np.int64),
        depth=1 + max(depth for _, depth in splits),
        terminals=tuple(terminals),
        leaf_row=np.array([row_of.get(id(t), -1) for t in terminals], dtype=np.int64),
        leaf_id=np.array([t.leaf if isinstance(t, LeafNode) else -1 for t in terminals], dtype=np.int32),
        leaves=LeafTable.of([(t.size, t.seed, t.key, t.shuffle) for t in leaves]),
    )


Node = LeafNode | SplitNode | ConcatNode | MixNode | PrefixNode


def consumed(node: Node, count: int) -> dict[int, int]:
    """How many of ``node``'s first ``count`` counters each leaf received: ``{leaf id: counters}``.

    Exact and O(nodes), without resolving a position: a split's left child gets the first
    ``left_count(count)`` of its counters (the rest go right, in order), a concat's child ``c`` gets
    ``E n_c`` plus its part of the last pass, a leaf gets them all. A leaf's counters are its epochs back
    to back, so ``divmod(counters, size)`` is its (epoch, offset)."""
    out: dict[int, int] = {}
    stack: list[tuple[Node, int]] = [(node, count)]
    while stack:
        here, n = stack.pop()
        if isinstance(here, MixNode):
            stack.append((here.root, n))
        elif isinstance(here, PrefixNode):  # the adopted remainder's samples, then the inner reel from skip
            head = min(n, len(here.leaves))
            for leaf, got in zip(*np.unique(here.leaves[:head], return_counts=True)):
                out[int(leaf)] = out.get(int(leaf), 0) + int(got)
            after, before = consumed(here.inner, here.skip + n - head), consumed(here.inner, here.skip)
            for leaf, got in after.items():
                out[leaf] = out.get(leaf, 0) + got - before.get(leaf, 0)
        elif isinstance(here, LeafNode):
            out[here.leaf] = out.get(here.leaf, 0) + n
        elif isinstance(here, SplitNode):
            left = (2 * n * here.a + here.b) // (2 * here.b)  # left_count(n), in exact Python integers
            stack += [(here.left, left), (here.right, n - left)]
        else:
            total = sum(here.sizes)
            passes, rest = divmod(n, total)
            start = 0
            for child, size in zip(here.children, here.sizes):
                stack.append((child, passes * size + min(max(rest - start, 0), size)))
                start += size
    return out


@dataclass(frozen=True, kw_only=True)
class ReelPlan:
    """The order of a whole reel: ``root`` and the length of one pass (``None``: endless)."""

    root: Node
    epoch_length: int | None

    def resolve(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """positions: int64[k] -> (leaf ids int32[k], sample indices int64[k])."""
        return self.root.resolve(np.asarray(positions, dtype=np.int64))

    @classmethod
    def single(cls, *, size: int, name: str, seed: int, shuffle: bool, epochs: int = 1) -> ReelPlan:
        """The reel of one source: its epochs back to back (a pass of a source shuffled over ``epochs``
        epochs holds each sample ``epochs`` times, as Energon's; ``-1``: endless)."""
        leaf = LeafNode(leaf=0, size=size, key=name_key(name), seed=seed, shuffle=shuffle, epochs=epochs)
        return cls(root=leaf, epoch_length=size if leaf.per_epoch else pass_length(size, epochs))
