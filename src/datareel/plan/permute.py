"""Keyed bijections on ``[0, n)``: the shuffle of one epoch of one source.

``permute(i, n, key)`` maps each index ``i`` to a position-independent,
pseudo-random index in ``[0, n)``; for a fixed ``(n, key)`` it is a bijection.
It needs O(1) memory (nothing of size ``n`` is ever built) and is vectorised
over ``i``.

Construction: a Feistel network on the smallest bit width ``w >= 2`` with
``2**w >= n`` (so ``2**w < 2 n`` for ``n > 2``), ``ROUNDS`` rounds with a
SplitMix64-style round function, and cycle walking: a value that lands in
``[n, 2**w)`` is encrypted again until it lands in ``[0, n)``.  For odd ``w``
the network is unbalanced (halves of ``w // 2`` and ``w - w // 2`` bits,
swapping roles every round); each round is still a bijection of ``[0, 2**w)``.
Cycle walking of a permutation of ``[0, 2**w)`` restricted to ``[0, n)`` is a
permutation of ``[0, n)`` (each cycle of the big permutation is followed until
it re-enters the small domain), which is what invariant I7 requires.  Keeping
the domain under ``2 n`` keeps walks short: fewer than 2 encryptions per index
on average, and few passes even for the small arrays of one micro-batch.
"""

from __future__ import annotations

import numpy as np

from ..errors import OptionError

ROUNDS = 4
"""Feistel rounds; four rounds of a good round function give a pseudo-random permutation."""

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


def feistel_width(n: int) -> int:
    """Smallest bit width ``w >= 2`` with ``2**w >= n``."""
    return max(2, (n - 1).bit_length())


def _round(r: np.ndarray, k: np.uint64 | np.ndarray, mask: np.uint64 | np.ndarray) -> np.ndarray:
    """Round function: SplitMix64 finaliser of ``r ^ k``, cut to ``mask``.

    r: uint64[k]; k, mask: uint64 scalars or uint64[k] -> uint64[k] (a new array; ``r`` is not modified).
    """
    z: np.ndarray = np.bitwise_xor(r, k)
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    z &= mask
    return z


def _encrypt(x: np.ndarray, keys: np.ndarray, w: int) -> np.ndarray:
    """One pass of the Feistel network over ``[0, 2**w)``. x: uint64[k] -> uint64[k].

    State ``x = (hi, lo)`` with ``lo`` of ``b`` bits; a round maps it to
    ``(lo, hi ^ F(lo))`` with the new ``lo`` of ``w - b`` bits.
    """
    b = w - w // 2
    for k in keys:
        a = w - b  # bits of the high part
        lo = x & np.uint64((1 << b) - 1)
        hi = x >> np.uint64(b)
        x = (lo << np.uint64(a)) | (hi ^ _round(lo, k, np.uint64((1 << a) - 1)))
        b = a
    return x


def permute(i: np.ndarray | int, n: int, keys: np.ndarray) -> np.ndarray:
    """Map indices ``i`` (each in ``[0, n)``) through the bijection keyed by ``keys``.

    i: int[k] (any integer dtype, or a scalar) -> int64[k]
    keys: uint64[ROUNDS], the round keys (see :func:`datareel.plan.rng.permutation_keys`).
    """
    x = np.asarray(i, dtype=np.uint64).reshape(-1)  # (k,)
    if n < 1:
        raise OptionError(f"permute needs a domain of at least one element, got n={n}: pass n >= 1")
    if n == 1:
        return np.zeros(x.shape, dtype=np.int64)
    w = feistel_width(n)
    limit = np.uint64(n)
    out = _encrypt(x, keys, w)  # (k,)
    todo = np.flatnonzero(out >= limit)  # (k_walk,) indices still outside [0, n)
    while todo.size:
        walked = _encrypt(out[todo], keys, w)
        out[todo] = walked
        todo = todo[walked >= limit]
    return out.astype(np.int64)


def _encrypt_each(x: np.ndarray, keys: np.ndarray, w: np.ndarray) -> np.ndarray:
    """:func:`_encrypt` with each element's own round keys and width.

    x: uint64[k], keys: uint64[k, ROUNDS], w: uint64[k] -> uint64[k]
    """
    one = np.uint64(1)
    b = w - w // np.uint64(2)  # (k,) bits of the low part in even rounds (of the high part in odd ones)
    a = w - b  # (k,)
    shapes = ((b, a, (one << b) - one, (one << a) - one), (a, b, (one << a) - one, (one << b) - one))
    for r in range(keys.shape[1]):
        low, high, low_mask, high_mask = shapes[r % 2]
        lo = x & low_mask
        x = (lo << high) | ((x >> low) ^ _round(lo, keys[:, r], high_mask))
    return x


def permute_each(i: np.ndarray, n: np.ndarray, w: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``permute(i[e], n[e], keys[e])`` for every element ``e`` at once (many sources and epochs in one pass).

    i: int64[k], each in ``[0, n[e])``; n: int64[k], each >= 1; w: uint64[k], ``feistel_width(n[e])``;
    keys: uint64[k, ROUNDS] -> int64[k], equal element by element to :func:`permute`.
    """
    limit = n.astype(np.uint64)  # (k,)
    out = _encrypt_each(i.astype(np.uint64), keys, w)  # (k,)
    todo = np.flatnonzero(out >= limit)  # (k_walk,)
    while todo.size:
        walked = _encrypt_each(out[todo], keys[todo], w[todo])
        out[todo] = walked
        todo = todo[walked >= limit[todo]]
    return out.astype(np.int64)
