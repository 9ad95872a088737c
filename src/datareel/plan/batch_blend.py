"""Which child each index of a batch-granular blend comes from: keyed, exact per block, rank-independent.

A batch-granular blend (Energon's ``BlendDataset`` / ``MixBatchDataset`` through :mod:`datareel.energon`)
draws each *unit* (one global batch of a child loader) from one of ``C`` children.  Unit ``u`` comes from
child :func:`choice` ``(seed, weights, [u])``: a function of the seed, the weights and ``u`` only, so every
rank draws the same child at the same unit and each child's own loader advances in lockstep on all ranks.

Blocks: units ``[k K, (k + 1) K)`` are block ``k``.  Every block holds child ``c`` exactly ``n_c`` times
(:func:`block_counts`: the largest-remainder apportionment of ``K`` by the weights, computed in exact
rationals, ties to the lower child), so after ``u`` units each child's count is within one block's rounding
of ``u w_c / sum(w)``.  Inside block ``k`` the order is a keyed bijection of ``[0, K)``
(:func:`~datareel.plan.permute.permute`, keys of ``(seed, k)``): slot ``j`` is child ``c`` iff
``permute(j)`` falls in ``c``'s range ``[N_c, N_c + n_c)`` (``N`` the running sum of the counts).

``K`` (:func:`block_size`): the smallest multiple of 100 that gives every child at least one unit per block,
``100 ceil(sum(w) / (100 min(w)))`` -- 100 for weights within a factor 100 of their sum's share, so
percentages are exact per block of 100 (weights 2 and 8: 20 and 80 units of every 100).  Weights more unequal
than ``1 : MAX_BLOCK`` are refused: a block would be too long to keep :func:`taken` cheap.

:func:`choice` costs O(1) per index, :func:`taken` O(K) per call; nothing depends on earlier blocks.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..errors import OptionError
from .permute import permute
from .rng import DOMAIN_BATCH_BLEND, round_keys

__all__ = ["MAX_BLOCK", "block_counts", "block_size", "choice", "taken"]

MAX_BLOCK = 1 << 20
"""The longest block: weights whose smallest share of their sum is below ``100 / MAX_BLOCK`` are refused."""


def _exact(weights: Sequence[float]) -> tuple[Fraction, ...]:
    """The weights as exact rationals, checked: at least one, each a finite number > 0."""
    if isinstance(weights, (str, bytes)) or len(weights) == 0:
        raise OptionError(f"a batch-granular blend needs at least one weight, got weights={weights!r}")
    out = []
    for c, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) or not math.isfinite(w):
            raise OptionError(f"weight {c} is {w!r}: each weight must be a finite number > 0 (e.g. 0.3 or 2)")
        if w <= 0:
            raise OptionError(f"weight {c} is {w!r}: each weight must be > 0 (leave a dataset out instead of 0)")
        out.append(Fraction(float(w)) if not isinstance(w, (int, np.integer)) else Fraction(int(w)))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _apportion(weights: tuple[Fraction, ...]) -> tuple[int, tuple[int, ...]]:
    total = sum(weights)
    K = 100 * math.ceil(total / (100 * min(weights)))
    if K > MAX_BLOCK:
        raise OptionError(
            f"weights {[float(w) for w in weights]} are too unequal: the smallest is {float(min(weights) / total):.3g} "
            f"of their sum, which needs blocks of {K} units (at most {MAX_BLOCK}); raise the smallest weight to at "
            f"least {float(total * 100 / MAX_BLOCK):.3g} or leave that dataset out"
        )
    quotas = [K * w / total for w in weights]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda c: (-(quotas[c] - counts[c]), c))
    for c in by_remainder[: K - sum(counts)]:
        counts[c] += 1
    return K, tuple(counts)


def block_size(weights: Sequence[float]) -> int:
    """``K``: units per block for these weights (see the module docstring)."""
    return _apportion(_exact(weights))[0]


def block_counts(weights: Sequence[float]) -> np.ndarray:
    """-> int64[C]: units of each child in every block (largest remainder; they sum to :func:`block_size`)."""
    return np.array(_apportion(_exact(weights))[1], dtype=np.int64)


@functools.lru_cache(maxsize=256)
def _keys(seed: int, block: int) -> np.ndarray:
    return round_keys(DOMAIN_BATCH_BLEND, seed, block)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 64:
        raise OptionError(f"seed={seed!r} must be an integer in [0, 2**64) (WorkerConfig.seed_offset)")
    return int(seed)


def choice(seed: int, weights: Sequence[float], indices: np.ndarray | Sequence[int] | int) -> np.ndarray:
    """The child each unit index comes from.

    indices: int[k] (or a scalar), each >= 0 -> int64[k], each in ``[0, len(weights))``.
    """
    seed = _check_seed(seed)
    K, counts = _apportion(_exact(weights))
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)  # (k,)
    if idx.size and idx.min() < 0:
        raise OptionError(f"unit indices must be >= 0, got {int(idx.min())}")
    ends = np.cumsum(counts)  # (C,) end of each child's range in [0, K)
    blocks, slots = np.divmod(idx, K)  # (k,), (k,)
    out = np.empty(idx.shape, dtype=np.int64)  # (k,)
    for block in np.unique(blocks):
        here = np.flatnonzero(blocks == block)  # (k_block,)
        ranks = permute(slots[here], K, _keys(seed, int(block)))  # (k_block,) in [0, K)
        out[here] = np.searchsorted(ends, ranks, side="right")
    return out


def taken(seed: int, weights: Sequence[float], child: int, index: int) -> int:
    """How many of the units ``[0, index)`` come from ``child``: whole blocks by their counts, the partial
    block by its first ``index mod K`` slots (O(K))."""
    K, counts = _apportion(_exact(weights))
    if isinstance(child, bool) or not isinstance(child, (int, np.integer)) or not 0 <= child < len(counts):
        raise OptionError(f"child={child!r} is not a child of this blend (0 <= child < {len(counts)})")
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
        raise OptionError(f"index={index!r} must be an integer >= 0 (a number of units)")
    full, rest = divmod(int(index), K)
    partial = choice(seed, weights, np.arange(full * K, full * K + rest, dtype=np.int64))  # (rest,)
    return full * counts[child] + int(np.count_nonzero(partial == child))
