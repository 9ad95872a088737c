"""The plain reel: position ``p`` is sample ``plan.resolve(p)``; micro-step ``s`` of rank ``r`` is a span
of positions given by the layout (see :mod:`datareel.plan.layout`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import OptionError, TopologyError
from ..plan.layout import Layout, origin
from ..plan.nodes import ReelPlan
from .base import Descriptor, Step
from .cursor import Cursor

CHUNK = 64
"""Micro-steps resolved per plan call: amortises numpy's per-call cost over many descriptors."""


class PlainReel:
    """Every position of the plan, in order; ``pass_length`` positions when finite (``repeat=False``)."""

    dropped = 0

    def __init__(self, plan: ReelPlan, pass_length: int | None):
        self.plan, self.pass_length = plan, pass_length

    def start(self) -> Cursor:
        return Cursor(0)

    def length(self, cursor: Cursor | None = None) -> int | None:
        return self.pass_length

    def bound(self) -> int | None:
        return self.pass_length

    def at_end(self, cursor: Cursor) -> bool:
        return self.pass_length is not None and cursor.position >= self.pass_length

    def spec(self) -> dict[str, Any]:
        return {}

    def check(self, cursor: Cursor, layout: Layout) -> None:
        length = self.pass_length
        if length is not None and cursor.position > length:
            raise TopologyError(
                f"state cursor={cursor.position} lies beyond the end of this repeat=False reel "
                f"(length {length}); restore it into a loader with repeat=True"
            )
        if length is None or cursor.position < length:  # the end of a pass resumes on any layout
            layout.check_cursor(cursor.position)

    def point(self, cursor: Cursor, skip: int) -> None:
        return None

    def descriptor(self, step: int, start: int, stop: int, point: tuple[int, int] | None) -> Descriptor:
        if point is not None:
            raise OptionError(
                f"address {(start, stop, *point)} names a window, but this loader's reel has none (no packing or "
                f"generator encode_sample): its addresses are (start, stop)"
            )
        positions = np.arange(start, stop, dtype=np.int64)  # (k,)
        source_ids, indices = self.plan.resolve(positions)  # (k,) each
        return Descriptor(step, positions, source_ids, indices)

    def stream(self, start: Cursor, layout: Layout, rank: int) -> Iterator[Step]:
        length, S = self.pass_length, layout.step_size
        if length is not None and start.position >= length:
            return
        o = origin(start.position, S)  # steps are the blocks [o + s S, o + (s + 1) S)
        first = (start.position - o) // S
        last = None if length is None else -(-(length - o) // S)  # steps of a finite reel
        for chunk in itertools.count(first, CHUNK):
            steps = range(chunk, chunk + CHUNK if last is None else min(chunk + CHUNK, last))
            if not steps:
                return
            spans = [layout.rank_span(step, rank, length, o) for step in steps]
            positions = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])  # (sum of spans,)
            source_ids, indices = self.plan.resolve(positions)  # (sum of spans,) each
            offset = 0
            for step, (a, b) in zip(steps, spans):
                end = o + (step + 1) * S
                after = Cursor(end if length is None else min(end, length))
                if a == b:  # an empty share of the final, partial micro-step
                    yield Step(None, after)
                    continue
                cut = slice(offset, offset + b - a)
                offset += b - a
                yield Step(Descriptor(step, positions[cut], source_ids[cut], indices[cut]), after)
