"""A reel plan with the block (locality) shuffle: each shuffled leaf's epochs in :mod:`.blocks` order, at the
period its share of the reel's positions gives it.

A leaf that receives the share ``f`` of the positions (the product of the splits' shares on its path; a
concatenation's children each read contiguous runs, so they keep their parent's share) sees its counter
advance ``P f`` per period of ``P`` positions; that is its own period (rounded, at least 1).  When ``P f`` is
a whole number and the splits' denominators divide the positions they see per period, counter ``c`` and
``c + P f`` lie exactly ``P`` positions apart, so a block stays at one offset mod ``P``.  Otherwise the
offset drifts by a few positions over a block's periods: every guarantee holds, the I/O saving shrinks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from fractions import Fraction
from typing import cast

from ..errors import OptionError
from .adopted import PrefixNode
from .blocks import BlockOrder, BlockShuffle
from .nodes import ConcatNode, LeafNode, MixNode, Node, ReelPlan, SplitNode, compile_mix


def with_blocks(plan: ReelPlan, options: BlockShuffle) -> ReelPlan:
    """``plan`` with every shuffled leaf in block order (``options`` resolved: its period set)."""
    if options.period is None:
        raise OptionError("with_blocks needs resolved BlockShuffle options (a period): call resolved(G) first")
    return ReelPlan(root=_rewrite(plan.root, Fraction(1), options), epoch_length=plan.epoch_length)


def _rewrite(node: Node, share: Fraction, options: BlockShuffle) -> Node:
    if isinstance(node, LeafNode):
        if not node.shuffle:
            return node  # a source that keeps its order (its own shuffle=False)
        if node.epochs != 1:
            raise OptionError(
                f"BlockShuffle cannot combine with shuffle_over_epochs_multiplier={node.epochs} (source "
                f"{node.leaf}): the block order is one epoch's; use multiplier 1, or the full shuffle"
            )
        period = max(1, round(options.period * share))  # type: ignore[operator]
        return dataclasses.replace(node, blocks=BlockOrder(options.block, period, options.window))
    if isinstance(node, SplitNode):
        left = share * Fraction(node.a, node.b)
        return dataclasses.replace(
            node, left=_rewrite(node.left, left, options), right=_rewrite(node.right, share - left, options)
        )
    if isinstance(node, ConcatNode):
        return dataclasses.replace(node, children=tuple(_rewrite(c, share, options) for c in node.children))
    if isinstance(node, PrefixNode):  # an adopted remainder keeps its order; the reel after it reads blocks
        return dataclasses.replace(node, inner=_rewrite(node.inner, share, options))
    return compile_mix(cast(SplitNode, _rewrite(node.root, share, options)))  # a split rewritten is a split


def leaves(plan: ReelPlan) -> Iterator[LeafNode]:
    """Every leaf of ``plan``'s tree."""
    stack: list[Node] = [plan.root]
    while stack:
        node = stack.pop()
        if isinstance(node, LeafNode):
            yield node
        elif isinstance(node, SplitNode):
            stack += [node.left, node.right]
        elif isinstance(node, ConcatNode):
            stack += list(node.children)
        elif isinstance(node, MixNode):
            stack.append(node.root)
        elif isinstance(node, PrefixNode):
            stack.append(node.inner)


def read_blocks(plan: ReelPlan) -> dict[int, int]:
    """``{leaf id: samples per block}`` of every leaf the plan reads in block order."""
    return {leaf.leaf: leaf.blocks.block for leaf in leaves(plan) if leaf.blocks is not None and leaf.blocks.block > 1}


def block_span(plan: ReelPlan) -> int:
    """Counters a super-period of the plan's block order spans (``k w P`` of its leaf with the longest one;
    about the positions between two starts of a slot's blocks). 0 for a plan without blocks."""
    return max(
        (b.block * b.window * b.period for b in (leaf.blocks for leaf in leaves(plan)) if b is not None), default=0
    )
