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
from typing import TYPE_CHECKING

import numpy as np
from torch.utils.data import Sampler

from .execute import Descriptor

if TYPE_CHECKING:
    from .loader import Loader

CHUNK = 64
"""Micro-steps resolved per plan call: amortises numpy's per-call cost over many descriptors."""


class DescriptorSampler(Sampler):
    """Yields this rank's descriptors from the loader's cursor at the moment iteration starts."""

    def __init__(self, loader: Loader):
        # a weak reference: Loader -> DataLoader -> sampler must not cycle back, or a dropped loader's
        # worker processes would live until the garbage collector runs (possibly in a forked child)
        self._loader = weakref.ref(loader)

    def __iter__(self) -> Iterator[Descriptor]:
        loader = self._loader()
        if loader is None:
            return iter(())
        return packed_descriptors(loader) if loader.packed is not None else plain_descriptors(loader)


def plain_descriptors(loader: Loader) -> Iterator[Descriptor]:
    layout, rank, length = loader.layout, loader.rank, loader.length
    first = loader.cursor // layout.step_size
    last = None if length is None else -(-length // layout.step_size)  # steps of a finite reel
    for chunk in itertools.count(first, CHUNK):
        steps = range(chunk, chunk + CHUNK if last is None else min(chunk + CHUNK, last))
        if not steps:
            return
        spans = [layout.rank_span(step, rank, length) for step in steps]
        positions = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])  # (sum of spans,)
        source_ids, indices = loader.plan.resolve(positions)
        offset = 0
        for step, (a, b) in zip(steps, spans):
            if a == b:  # an empty share of the final, partial micro-step
                continue
            cut = slice(offset, offset + b - a)
            offset += b - a
            yield Descriptor(step, positions[cut], source_ids[cut], indices[cut])


def packed_descriptors(loader: Loader) -> Iterator[Descriptor]:
    layout, rank, S = loader.layout, loader.rank, loader.layout.step_size
    stream = loader.packed.stream(*loader.pack_at)
    for step in itertools.count(loader.cursor // S):
        group = list(itertools.islice(stream, S))  # this micro-step's packs, all ranks
        if not group:
            return
        base = step * S
        end = None
        if len(group) < S:  # the packed reel ends inside this step
            end = base + len(group)
            loader.packed_length = end
        loader.marks[step] = (base + len(group), group[-1][1])
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
