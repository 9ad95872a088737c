"""Per-source epochs: a source-local counter ``j`` -> the sample index it reads.

Counter ``j`` of a source of ``n`` samples falls in epoch ``j // n`` at offset
``j % n``; with shuffling the offset goes through that epoch's own keyed
permutation.  The counter runs on forever, so the shuffle moves seamlessly from
one epoch into the next, and each epoch holds every sample exactly once.
"""

from __future__ import annotations

import numpy as np

from .permute import permute
from .rng import permutation_keys


def source_indices(j: np.ndarray, n: int, *, seed: int, source_key: int, shuffle: bool) -> np.ndarray:
    """Sample indices for source-local counters.

    j: int64[k], each >= 0 -> int64[k], each in [0, n)
    """
    j = np.asarray(j, dtype=np.int64)
    epoch, offset = np.divmod(j, n)  # (k,), (k,)
    if not shuffle:
        return offset
    if epoch.size == 0:
        return offset
    first, last = int(epoch.min()), int(epoch.max())
    if first == last:  # the common case: a micro-batch or a chunk inside one epoch
        return permute(offset, n, permutation_keys(seed, source_key, first))
    out = np.empty_like(offset)
    for e in np.unique(epoch):
        sel = epoch == e  # (k,) bool
        out[sel] = permute(offset[sel], n, permutation_keys(seed, source_key, int(e)))
    return out
