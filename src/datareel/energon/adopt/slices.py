"""Which samples each old worker read, as megatron.energon 7.x splits a dataset for training.

Every global worker (rank-major) gets a contiguous range of the dataset's samples (:func:`..val.worker_slices`;
the facade's val order uses the same split: the extras spread by a bit-reversal order, rotated by the samples
of the datasets before it in a blend); the range is cut at shard boundaries, and each piece longer than
1.5 × ``max_samples_per_sequence`` into ``round(len / max_samples_per_sequence)`` near-equal slices.  The
worker reads its slices in a shuffled order, several at a time (:mod:`.replay`).
"""

from __future__ import annotations

import numpy as np


def slice_offsets(counts: np.ndarray, start: int, stop: int, max_per_sequence: int | None) -> list[int]:
    """The slice boundaries of samples ``[start, stop)`` of a dataset whose shards hold ``counts`` int64[S]
    samples: the first sample of each slice, then ``stop`` (``[start]`` alone: no samples)."""
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # (S + 1,)
    out: list[int] = []
    for shard in range(len(counts)):
        a, b = max(int(bounds[shard]), start), min(int(bounds[shard + 1]), stop)
        if a < b:
            out.extend(_cut(a, b, max_per_sequence))
    return [*out, stop] if out else [start]


def _cut(a: int, b: int, most: int | None) -> list[int]:
    """The slice starts of one shard's piece ``[a, b)``."""
    if most is None or b - a <= most * 1.5:
        return [a]
    pieces = max(round((b - a) / most), 1)
    width = (b - a) / pieces
    starts = [a + int(i * width) for i in range(pieces)]
    return [s for i, s in enumerate(starts) if i == 0 or s != starts[i - 1]]
