"""Two-way low-discrepancy split of a counter stream: the building block of mixing.

A node that sends a share ``f = a / b`` of its positions left sends local
position ``q`` left iff ``left_count(q + 1) > left_count(q)``, where

    left_count(q) = floor(q·a/b + 1/2)        # positions among the first q that went left

so after any prefix of ``q`` positions the left child has received within
1/2 of ``q·f`` (a Beatty sequence, offset 1/2).  Random access is O(1): a
position's child and its index there (``left_count(q)`` or
``q - left_count(q)``) follow from ``q`` alone, with exact integer arithmetic.
"""

from __future__ import annotations

import numpy as np

FAST_LIMIT = 1 << 30  # b up to 2^30 keeps 2·r·a + b below 2^62 in int64


def left_count(q: np.ndarray, a: int, b: int) -> np.ndarray:
    """``floor((2 q a + b) / (2 b))``, exact. q: int64[k] -> int64[k].

    Writing ``q = t b + r`` keeps the products small: ``t a + floor((2 r a + b) / (2 b))``.
    """
    q = np.asarray(q, dtype=np.int64)
    if b <= FAST_LIMIT:
        t, r = np.divmod(q, b)  # (k,), (k,)
        out: np.ndarray = t * a + (2 * r * a + b) // (2 * b)
        return out
    # exact Python-int arithmetic for very large denominators (meta-epochs over 2^30 samples)
    return np.array([(2 * int(x) * a + b) // (2 * b) for x in q.tolist()], dtype=np.int64)


def split(q: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Route local positions: -> (goes_left bool[k], index within the chosen child int64[k])."""
    before = left_count(q, a, b)
    goes_left = left_count(q + 1, a, b) > before
    return goes_left, np.where(goes_left, before, q - before)


def split_each(q: np.ndarray, a: np.ndarray, b: np.ndarray, turn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`split` with each element's own share ``a[e] / b[e]`` (each ``b[e] <= FAST_LIMIT``);
    ``turn = 2 (b - a)``, precomputed.

    q, a, b, turn: int64[k] -> (goes_left bool[k], index within the chosen child int64[k])

    With ``q = t b + r`` and ``c = 2 r a + b``: ``left_count(q) = t a + c // 2b``, and ``q`` goes left
    iff ``left_count(q + 1)`` is one more, i.e. iff ``c mod 2b >= 2 (b - a)``.
    """
    t = q // b
    c = 2 * (q - t * b) * a + b  # (k,)
    b2 = 2 * b
    f = c // b2
    goes_left = c - f * b2 >= turn
    before = t * a + f  # (k,) left_count(q)
    return goes_left, np.where(goes_left, before, q - before)
