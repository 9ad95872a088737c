"""Length-planned packing of one window of reel positions (pure, no I/O).

A window is ``window`` consecutive positions of the input reel with their
sample lengths; first-fit-decreasing puts them into packs of at most
``max_length``.  The packed reel is the concatenation of every window's packs,
so pack ``o`` of window ``w`` depends on that window alone.
"""

from __future__ import annotations

import numpy as np

from ..errors import DatareelError

OVER_LENGTH = ("error", "truncate", "own_pack", "drop")


def first_fit_decreasing(lengths: np.ndarray, max_length: int) -> list[np.ndarray]:
    """Pack items into bins of capacity ``max_length``, first fit, longest first.

    lengths: int64[k], each in [1, max_length] -> packs, each int64[j >= 1] of item numbers
    (ascending within a pack; no packs when k = 0); packs are ordered by their first (longest) item's placement.
    Ties keep the window's order, so the result is a pure function of ``lengths``.
    """
    if len(lengths) == 0:
        return []  # no items, no packs (never one empty pack)
    order = np.argsort(-lengths, kind="stable")  # (k,) longest first, stable
    remaining = np.empty(len(lengths), dtype=np.int64)  # capacity left per open pack (<= k packs)
    owner = np.empty(len(lengths), dtype=np.int64)  # (k,) pack of each item
    packs = 0
    for item in order.tolist():
        length = int(lengths[item])
        fits = np.flatnonzero(remaining[:packs] >= length)
        if fits.size:
            pack = int(fits[0])
        else:
            pack, packs = packs, packs + 1
            remaining[pack] = max_length
        remaining[pack] -= length
        owner[item] = pack
    by_pack = np.argsort(owner, kind="stable")  # items grouped by pack, ascending within
    bounds = np.cumsum(np.bincount(owner, minlength=packs))[:-1]
    return np.split(by_pack, bounds)


def plan_window(lengths: np.ndarray, max_length: int, over_length: str) -> tuple[list[np.ndarray], np.ndarray]:
    """Packs of one window and the items dropped by the over-length policy.

    lengths: int64[k] -> (packs: list of int64[j] item numbers, dropped: int64[d] item numbers)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if (lengths < 0).any():
        raise DatareelError(f"sample lengths must be >= 0, got {int(lengths.min())}")
    over = lengths > max_length
    dropped = np.empty(0, dtype=np.int64)
    planned = np.maximum(lengths, 1)  # empty samples still take a place in a pack
    if over.any():
        if over_length == "error":
            raise DatareelError(
                f"a sample of length {int(lengths[over][0])} exceeds max_length={max_length}; choose "
                f"Packing(over_length='truncate' | 'own_pack' | 'drop') or a larger max_length"
            )
        if over_length == "drop":
            dropped = np.flatnonzero(over)
            planned = np.where(over, 0, planned)
        else:  # truncate / own_pack: the sample fills a pack by itself
            planned = np.where(over, max_length, planned)
    keep = np.flatnonzero(planned > 0)  # (k_kept,)
    packs = first_fit_decreasing(planned[keep], max_length)
    return [keep[p] for p in packs], dropped
