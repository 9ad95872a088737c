"""What a loader's order costs in reads, computed from the plan alone (no data is read): how many requests
each reader makes per sample when it fetches a whole block at a time, how many bytes it reads per byte it
uses, and how shuffled the result is (distinct blocks per global batch, how often neighbouring positions or
the same offset of the next global batch share a block).

A *reader* is a rank (the blocks it fetches serve all its DataLoader workers: a node-local cache, or the
page cache for local disk) or, with ``per_worker=True``, each worker of each rank on its own.  A reader
fetches the part of a block in one shard (blocks: :func:`datareel.plan.locality.read_blocks`; a source
without blocks reads sample by sample) once, and keeps it until it has used it: requests are the distinct
``(reader, source, block part)`` pairs of the window, so keep the window inside one epoch of every source.
Samples are taken as equally sized.

Example::

    loader = datareel.Loader(data, global_batch_size=256, micro_batch_size=16, world_size=8, rank=0,
                             shuffle=datareel.BlockShuffle(block=16))
    profile = read_profile(loader, positions=1 << 16, shard_size=1000)
    profile.requests_per_sample   # ~1/16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError
from ..plan.locality import read_blocks


@dataclass(frozen=True)
class ReadProfile:
    """The cost of one window of positions (see the module doc)."""

    samples: int
    requests: int
    bytes_read: int  # in samples: the block parts fetched, whole
    blocks_per_batch: float  # distinct blocks in a global batch / G
    adjacent_same_block: float  # share of positions p whose block is p + 1's
    next_batch_same_block: float  # share of positions p whose block is p + G's

    @property
    def requests_per_sample(self) -> float:
        return self.requests / self.samples

    @property
    def read_per_used(self) -> float:
        """Bytes read per byte used."""
        return self.bytes_read / self.samples


def read_profile(
    loader: Any, positions: int, *, shard_size: int | None = None, per_worker: bool = False, workers: int = 0
) -> ReadProfile:
    """The :class:`ReadProfile` of reel positions ``[0, positions)`` of ``loader`` (a constant global batch
    size; its micro-batch size and world size place positions on ranks).  ``shard_size``: samples per shard
    (a block's part in each shard is one read); ``per_worker`` with ``workers`` per rank: each worker reads
    on its own (no shared cache)."""
    G = loader.layout.schedule.constant
    if G is None or positions < 1:
        raise OptionError(f"read_profile needs a constant global batch size and positions >= 1 (got {positions})")
    m, W = loader.micro_batch_size, loader.world_size
    p = np.arange(positions, dtype=np.int64)  # (P,)
    leaf, index = loader.plan.resolve(p)  # (P,), (P,)
    k = np.ones(int(leaf.max()) + 1, dtype=np.int64)
    for source, block in read_blocks(loader.plan).items():
        if source < len(k):
            k[source] = block
    size = np.array([len(s) for s in loader.sources], dtype=np.int64)[: len(k)]
    block = index // k[leaf]  # (P,)
    first, last = block * k[leaf], np.minimum(block * k[leaf] + k[leaf], size[leaf])  # (P,) the block's span
    if shard_size:
        shard = index // shard_size
        first = np.maximum(first, shard * shard_size)
        last = np.minimum(last, (shard + 1) * shard_size)
    reader = (p % (m * W)) // m  # (P,) the rank
    if per_worker and workers > 1:
        reader = reader * workers + (p // (m * W)) % workers  # the step's worker (round robin)
    parts = np.unique(np.stack([reader, leaf.astype(np.int64), first, last], axis=1), axis=0)  # (R, 4)
    ident = leaf.astype(np.int64) * (1 << 40) + block  # (P,) one number per (source, block)
    whole = positions // G * G
    per_batch = ident[:whole].reshape(-1, G) if whole else ident[:0].reshape(0, G)
    distinct = float(np.mean([len(np.unique(row)) for row in per_batch]) / G) if len(per_batch) else 1.0
    return ReadProfile(
        samples=positions,
        requests=len(parts),
        bytes_read=int((parts[:, 3] - parts[:, 2]).sum()),
        blocks_per_batch=distinct,
        adjacent_same_block=float(np.mean(ident[1:] == ident[:-1])) if positions > 1 else 0.0,
        next_batch_same_block=float(np.mean(ident[G:] == ident[:-G])) if positions > G else 0.0,
    )
