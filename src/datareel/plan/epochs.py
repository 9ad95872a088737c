"""Per-source epochs: a source-local counter ``j`` -> the sample index it reads.

Counter ``j`` of a source of ``n`` samples falls in epoch ``j // n`` at offset
``j % n``; with shuffling the offset goes through that epoch's own keyed
permutation.  The counter runs on forever, so the shuffle moves seamlessly from
one epoch into the next, and each epoch holds every sample exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .permute import feistel_width, permute, permute_each
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


@dataclass(frozen=True, eq=False)
class LeafTable:
    """The parameters of several sources as arrays, to resolve their counters in one pass.

    sizes: int64[L]; widths: uint64[L] (``feistel_width`` of each size); shuffles: bool[L] (and size > 1);
    seeds, keys: each source's seed and name key (Python ints, for :func:`permutation_keys`).
    """

    sizes: np.ndarray
    widths: np.ndarray
    shuffles: np.ndarray
    seeds: tuple[int, ...]
    keys: tuple[int, ...]

    @classmethod
    def of(cls, sources: list[tuple[int, int, int, bool]]) -> LeafTable:
        """sources: ``(size, seed, key, shuffle)`` each."""
        sizes = [n for n, _, _, _ in sources]
        return cls(
            sizes=np.array(sizes, dtype=np.int64),
            widths=np.array([feistel_width(n) for n in sizes], dtype=np.uint64),
            shuffles=np.array([s and n > 1 for n, _, _, s in sources], dtype=bool),
            seeds=tuple(seed for _, seed, _, _ in sources),
            keys=tuple(key for _, _, key, _ in sources),
        )

    def indices(self, j: np.ndarray, source: np.ndarray) -> np.ndarray:
        """Counter ``j[e]`` of source ``source[e]`` -> its sample index, equal element by element to
        :func:`source_indices`.

        j: int64[k], each >= 0; source: int64[k], each in [0, L) -> int64[k]
        """
        epoch, offset = np.divmod(j, self.sizes[source])  # (k,), (k,)
        sel = np.flatnonzero(self.shuffles[source])  # (k_s,) elements whose source shuffles
        if sel.size == 0:
            return offset
        src, ep = source[sel], epoch[sel]  # (k_s,), (k_s,)
        pairs, which = _unique_pairs(src, ep, len(self.sizes))  # (u, 2), (k_s,)
        table = np.stack(  # (u, ROUNDS): the round keys of each (source, epoch) present
            [permutation_keys(self.seeds[s], self.keys[s], e) for s, e in pairs.tolist()]
        )
        out: np.ndarray = offset.copy()
        out[sel] = permute_each(offset[sel], self.sizes[src], self.widths[src], table[which])
        return out


def _unique_pairs(source: np.ndarray, epoch: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(source, epoch)`` pairs and each element's pair. int64[k] each -> (int64[u, 2], int64[k])."""
    low = int(epoch.min())
    if (int(epoch.max()) - low + 1) * count < 1 << 62:  # one int64 code per pair
        codes, which = np.unique((epoch - low) * count + source, return_inverse=True)  # (u,), (k,)
        return np.stack([codes % count, codes // count + low], axis=1), which.reshape(-1)
    pairs, which = np.unique(np.stack([source, epoch], axis=1), axis=0, return_inverse=True)
    return pairs, which.reshape(-1)
