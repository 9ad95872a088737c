"""Which samples this process will read one block period from now: the lookahead of the block shuffle in a
bucket.

Under :class:`~datareel.BlockShuffle` a block's samples sit at one offset for ``k w`` periods, and every slot
starts its next blocks at once, one *super-period* (``k w P`` positions) later; a process that fetches those
blocks only when it needs them waits for a burst of GETs each super-period.  A process sees its own
micro-batches in order, ``stride`` positions apart (``m W`` times its share of the rank's steps: every step
at ``num_workers=0``, every ``N``-th with ``N`` workers), so the positions it will read one super-period on are
its current ones plus ``stride`` times the steps that span holds — a pure function of the plan, resolved here
and handed to the reader as a hint (``WebDatasetSource.fetch_ahead``, bounded bytes).  A hint never fails a
micro-batch: positions past :data:`POSITION_LIMIT` (or that the plan's int64 arithmetic cannot reach) give
no hint.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

from ..plan.nodes import ReelPlan

log = logging.getLogger("datareel")
POSITION_LIMIT = 1 << 62
"""The furthest reel position looked ahead to: int64, with room for the plan's own sums (the options'
bounds keep a super-period under 2^48, :data:`datareel.plan.blocks.SUPER_PERIOD_LIMIT`)."""


@dataclass
class Lookahead:
    """The plan and the span ahead (positions, about one super-period); the last micro-batch seen by this
    process (reset after fork: a worker sees its own sequence)."""

    plan: ReelPlan
    span: int
    _last: tuple[int, int] | None = field(default=None, repr=False)  # (pid, first position)

    def ahead(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(source_ids, indices)`` this process reads about ``span`` positions after ``positions`` (int64[m]),
        or ``None`` before its stride is known (its first micro-batch, or after a restore moved it back)."""
        if not len(positions):
            return None
        first, pid = int(positions[0]), os.getpid()
        last, self._last = self._last, (pid, first)
        if last is None or last[0] != pid or first <= last[1]:
            return None
        stride = first - last[1]
        shift = stride * max(1, -(-self.span // stride))  # a Python int: exact, however far
        if int(positions.max()) + shift > POSITION_LIMIT:  # past what a position can be: no hint, never an error
            return None
        future = positions + np.int64(shift)  # (m,)
        try:
            leaf, index = self.plan.resolve(future)
        except ArithmeticError as exc:  # the plan's int64 math cannot reach that far: a hint only, none given
            log.debug("no lookahead %d positions after %d: %r", shift, first, exc)
            return None
        return leaf.astype(np.int64), index

    def __getstate__(self) -> dict[str, object]:
        return {"plan": self.plan, "span": self.span, "_last": None}
