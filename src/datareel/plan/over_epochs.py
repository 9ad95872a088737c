"""Shuffling over several epochs (Energon's ``shuffle_over_epochs_multiplier``): counter -> sample index.

Energon shuffles the list of its slices repeated ``k`` times, so every sample is seen exactly ``k``
times in ``k`` epochs while a sample may come back before the others have been seen once; with
``k = -1`` it draws slices with replacement, for ever.  Here the same meanings are sample-exact and a
pure function of the source-local counter ``j`` (no worker, no history):

- ``k >= 2``: counters fall in blocks of ``k n``; block ``b`` is a keyed bijection of ``[0, k n)``
  (its own keys per block) read modulo ``n``, so each block holds every sample exactly ``k`` times;
- ``k = -1``: each counter draws a sample uniformly, with replacement, from a keyed hash of
  ``(seed, source, j)``.

``k = 1`` is the per-epoch shuffle of :mod:`.epochs` (unchanged; not handled here).
"""

from __future__ import annotations

import functools

import numpy as np

from .permute import ROUNDS, _round, permute
from .rng import round_keys

DOMAIN_OVER_EPOCHS = 0x6F766572  # "over": the bijection of one block of k epochs
DOMAIN_DRAW = 0x64726177  # "draw": the with-replacement draws of k = -1
ENDLESS = -1
"""``shuffle_over_epochs_multiplier = -1``: draws with replacement."""


def check_multiplier(value: object) -> int | None:
    """``value`` if it is a valid multiplier (``None``, ``-1`` or an integer >= 1), else ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (value == -1 or value >= 1):
        raise ValueError(
            f"shuffle_over_epochs_multiplier={value!r} must be None (no shuffle), 1 (shuffle each epoch), an "
            f"integer k >= 2 (each sample k times in k epochs) or -1 (draw with replacement)"
        )
    return int(value)


def combine(outer: int | None, inner: int | None) -> int | None:
    """Energon's rule for nested multipliers: ``None`` wins, then ``-1``, else their product."""
    if outer is None or inner is None:
        return None
    if outer == ENDLESS or inner == ENDLESS:
        return ENDLESS
    return outer * inner


@functools.lru_cache(maxsize=4096)
def block_keys(seed: int, source_key: int, epochs: int, block: int) -> np.ndarray:
    """Round keys of block ``block`` (``epochs`` epochs long) of a source. -> uint64[ROUNDS], read-only."""
    return round_keys(DOMAIN_OVER_EPOCHS, seed, source_key, epochs, block)


@functools.lru_cache(maxsize=1024)
def draw_keys(seed: int, source_key: int) -> np.ndarray:
    """The keys of a source's with-replacement draws. -> uint64[ROUNDS], read-only."""
    keys = np.random.SeedSequence([DOMAIN_DRAW, seed, source_key]).generate_state(ROUNDS, dtype=np.uint64)
    keys.setflags(write=False)
    return keys


_ALL = np.uint64((1 << 64) - 1)
_TOP53 = np.uint64(11)


def draws(j: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """Counter ``j`` -> a sample drawn uniformly from ``[0, n)``, independently per counter.

    j: int64[k] -> int64[k].  The 53 top bits of a keyed 64-bit hash scale to ``[0, n)`` (bias below
    ``n / 2^53``)."""
    h = np.asarray(j, dtype=np.int64).astype(np.uint64)  # (k,)
    for key in keys:
        h = _round(h, key, _ALL)
    unit = (h >> _TOP53).astype(np.float64) * (1.0 / (1 << 53))  # (k,) in [0, 1)
    picked: np.ndarray = np.minimum((unit * n).astype(np.int64), n - 1)
    return picked


def over_epochs_indices(j: np.ndarray, n: int, *, seed: int, source_key: int, epochs: int) -> np.ndarray:
    """Sample indices for source-local counters shuffled over ``epochs`` epochs (``-1``: with replacement).

    j: int64[k], each >= 0 -> int64[k], each in [0, n)
    """
    j = np.asarray(j, dtype=np.int64)
    if n == 1:
        return np.zeros(j.shape, dtype=np.int64)
    if epochs == ENDLESS:
        return draws(j, n, draw_keys(seed, source_key))
    if epochs < 2:
        raise ValueError(f"over_epochs_indices needs epochs >= 2 or -1, got {epochs}; 1 is plan.epochs' shuffle")
    span = n * epochs
    block, offset = np.divmod(j, span)  # (k,), (k,)
    out = np.empty_like(offset)
    for b in np.unique(block).tolist():
        sel = block == b  # (k,) bool
        out[sel] = permute(offset[sel], span, block_keys(seed, source_key, epochs, b)) % n
    return out


def pass_length(n: int, epochs: int) -> int | None:
    """Samples in one pass of a source of ``n`` samples shuffled over ``epochs`` epochs (Energon's pass
    holds each sample ``epochs`` times; ``-1`` is endless: ``None``)."""
    return None if epochs == ENDLESS else n * max(epochs, 1)
