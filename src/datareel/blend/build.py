"""Plan building: a dataset tree (sources and blends) -> its reel plan and its leaves."""

from __future__ import annotations

from fractions import Fraction

from ..errors import DatareelError, OptionError
from ..plan.adopted import PrefixNode
from ..plan.nodes import ConcatNode, LeafNode, Node, ReelPlan, SplitNode, compile_mix
from ..plan.rng import name_key
from ..sources.base import Source
from .adopted import Adopted
from .distinct import check_distinct
from .tree import MAX_DENOMINATOR, Blend, Concat, EpochizedMix, Mix, length_of


def build_plan(dataset: Source | Blend, *, seed: int, shuffle: bool) -> tuple[ReelPlan, list[Source]]:
    """The reel plan of a dataset tree and its leaves (leaf id = index in the list)."""
    if isinstance(dataset, Adopted):  # the remainder first, then the dataset's reel from the next epoch
        inner, leaves = build_plan(dataset.dataset, seed=seed, shuffle=shuffle)
        order = dataset.remainder.order()
        node = PrefixNode(order[0], order[1], dataset.remainder.skip, inner.root)
        return ReelPlan(root=node, epoch_length=len(dataset.remainder)), leaves
    if isinstance(dataset, Source):
        plan = ReelPlan.single(
            size=len(dataset),
            name=dataset.name,
            seed=seed,
            shuffle=_shuffles(dataset, shuffle),
            epochs=_epochs(dataset),
        )
        return plan, [dataset]
    leaves: list[Source] = []
    root = _node(dataset, seed, shuffle, leaves, "0")
    check_distinct(leaves, dataset.name)  # leaves the state could not tell apart (see .distinct)
    return ReelPlan(root=root, epoch_length=dataset.size_hint()), leaves


def _shuffles(source: Source, default: bool) -> bool:
    own = getattr(source, "shuffle", None)
    return default if own is None else bool(own)


def _epochs(source: Source) -> int:
    """Epochs a source shuffles over at once (``shuffle_over_epochs_multiplier``; 1: each epoch its own)."""
    return int(getattr(source, "over_epochs", 1))


def _node(ds: Source | Blend, seed: int, shuffle: bool, leaves: list[Source], path: str) -> Node:
    if isinstance(ds, Source):
        leaves.append(ds)
        return LeafNode(
            leaf=len(leaves) - 1,
            size=len(ds),
            key=name_key(f"{path}:{ds.name}"),
            seed=seed,
            shuffle=_shuffles(ds, shuffle),
            epochs=_epochs(ds),
        )
    nodes = [_node(c, seed, shuffle, leaves, f"{path}.{i}") for i, c in enumerate(ds.children)]
    if isinstance(ds, Concat):
        return ConcatNode(children=tuple(nodes), sizes=tuple(length_of(c) for c in ds.children))
    if isinstance(ds, Mix):
        return _compiled(_tree(nodes, [Fraction(w) for w in ds.weights], exact=False, where=ds.name))
    if isinstance(ds, EpochizedMix):
        kept = [(n, c) for n, c in zip(nodes, ds.counts) if c > 0]
        return _compiled(_tree([n for n, _ in kept], [Fraction(c) for _, c in kept], exact=True, where=ds.name))
    raise DatareelError(f"unknown blend type {type(ds).__name__}")


def _compiled(node: Node) -> Node:
    """A mix's split tree as one vectorised :class:`~datareel.plan.nodes.MixNode` (nested mixes merged in)."""
    return compile_mix(node) if isinstance(node, SplitNode) else node


def _tree(nodes: list[Node], weights: list[Fraction], *, exact: bool, where: str) -> Node:
    """A balanced binary tree of splits over ``nodes`` (depth ceil(log2 k): the discrepancy bound
    grows with depth, so the tree is balanced by count)."""
    if len(nodes) == 1:
        return nodes[0]
    half = (len(nodes) + 1) // 2
    left_w, right_w = sum(weights[:half]), sum(weights[half:])
    share = left_w / (left_w + right_w)
    if not exact:
        share = share.limit_denominator(MAX_DENOMINATOR)
        if share in (0, 1):
            raise OptionError(
                f"{where}: a weight is below 2^-24 of its neighbours' ({float(left_w)} vs {float(right_w)}); "
                f"such a child would never be read: raise it or drop it"
            )
    left = _tree(nodes[:half], weights[:half], exact=exact, where=where)
    right = _tree(nodes[half:], weights[half:], exact=exact, where=where)
    return SplitNode(left=left, right=right, a=share.numerator, b=share.denominator)
