"""Descriptor streams: which micro-batches this rank computes, from the loader's cursor on.

Runs in the main process (a ``torch.utils.data.Sampler`` of descriptors);
workers only execute descriptors.  Without packing, micro-step ``s`` of rank
``r`` is a span of reel positions (see :mod:`datareel.plan.layout`).  With
packing, the same layout applies to the packed reel: every rank walks the same
pack stream and keeps its own ``m`` packs of each micro-step; the
``(window, offset)`` after each step is recorded for the loader's state.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from torch.utils.data import Sampler

from .execute import Descriptor
from .packing import PackedReel
from .plan.layout import Layout
from .plan.reel import ReelPlan

if TYPE_CHECKING:
    from .loader import Loader

CHUNK = 64
"""Micro-steps resolved per plan call: amortises numpy's per-call cost over many descriptors."""


@dataclass(frozen=True)
class Start:
    """What a descriptor stream needs, copied from the loader when iteration starts.

    The stream must not hold the loader itself: DataLoader keeps the stream (its sampler
    iterator) alive, and a loader reachable from it would only be freed by the garbage
    collector, keeping worker processes alive until then.
    """

    layout: Layout
    rank: int
    length: int | None
    cursor: int
    plan: ReelPlan
    packed: PackedReel | None
    pack_at: tuple[int, int]
    marks: dict[int, tuple[int, tuple[int, int]]]


class DescriptorSampler(Sampler):
    """Yields this rank's descriptors from the loader's cursor at the moment iteration starts."""

    def __init__(self, loader: Loader):
        self._loader = weakref.ref(loader)  # the loader owns the DataLoader that owns this sampler

    def __iter__(self) -> Iterator[Descriptor]:
        loader = self._loader()
        if loader is None:
            return iter(())
        start = Start(loader.layout, loader.rank, None if loader.packed is not None else loader.length,
                      loader.cursor, loader.plan, loader.packed, loader.pack_at, loader.marks)
        del loader
        return packed_descriptors(start) if start.packed is not None else plain_descriptors(start)


def plain_descriptors(start: Start) -> Iterator[Descriptor]:
    layout, rank, length = start.layout, start.rank, start.length
    first = start.cursor // layout.step_size
    last = None if length is None else -(-length // layout.step_size)  # steps of a finite reel
    for chunk in itertools.count(first, CHUNK):
        steps = range(chunk, chunk + CHUNK if last is None else min(chunk + CHUNK, last))
        if not steps:
            return
        spans = [layout.rank_span(step, rank, length) for step in steps]
        positions = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])  # (sum of spans,)
        source_ids, indices = start.plan.resolve(positions)
        offset = 0
        for step, (a, b) in zip(steps, spans):
            if a == b:  # an empty share of the final, partial micro-step
                continue
            cut = slice(offset, offset + b - a)
            offset += b - a
            yield Descriptor(step, positions[cut], source_ids[cut], indices[cut])


def packed_descriptors(start: Start) -> Iterator[Descriptor]:
    layout, rank, S = start.layout, start.rank, start.layout.step_size
    stream = start.packed.stream(*start.pack_at)
    for step in itertools.count(start.cursor // S):
        group = list(itertools.islice(stream, S))  # this micro-step's packs, all ranks
        if not group:
            return
        base = step * S
        end = None
        if len(group) < S:  # the packed reel ends inside this step
            end = base + len(group)
            start.packed.known_length = end
        start.marks[step] = (base + len(group), group[-1][1])
        a, b = layout.rank_span(step, rank, end)
        mine = [pack for pack, _ in group[a - base : b - base]]
        if mine:
            yield Descriptor(
                step,
                np.concatenate([p.positions for p in mine]),
                np.concatenate([p.source_ids for p in mine]),
                np.concatenate([p.indices for p in mine]),
                pack_sizes=np.array([len(p.positions) for p in mine], dtype=np.int64),
                packed_positions=np.arange(a, b, dtype=np.int64),
                truncate=np.concatenate([p.truncate for p in mine]),
            )
        if end is not None:
            return
