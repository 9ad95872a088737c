"""The block (locality) shuffle: one epoch of a source in an order that reads whole blocks, still a pure
function of ``(seed, source, epoch, counter)``.

Position -> rank depends only on ``p mod (m W)`` (:mod:`.layout`).  So if the ``k`` samples of one
*block* (source indices ``[b k, b k + k)``: consecutive samples of a shard) sit at the **same offset
modulo a period** ``P`` in ``k`` consecutive periods, the rank that reads that offset reads the whole
block, on every topology whose ``m W`` divides ``P``.  With a *window* of ``w`` blocks, ``w`` blocks share
one offset over ``k w`` periods, their ``k w`` samples in a keyed order: a block then recurs across the
next ``k w`` global batches in fewer of them (about ``1/w`` of adjacent periods), at ``w`` times the memory.

One epoch of a source of ``n`` samples, block ``k``, window ``w``, period ``P`` (``C = k w P`` counters per
*super-period*, ``B = n // k`` whole blocks, ``S = n // C`` whole super-periods):

- counter ``r < S C``: super-period ``s = r // C``, then ``t = (r % C) // P`` (which of its ``k w``
  periods) and ``o = r % P`` (the offset): *slot* ``u = s P + o`` holds ``w`` blocks; ``q = permute(t)``
  over ``[0, k w)`` keyed by the slot (``q = t`` for ``w = 1``: a block's samples in shard order, one a
  period) picks member ``q % k`` of block ``permute(u w + q // k)`` over ``[0, B)``.  So every block of
  the structured part is read at one offset mod ``P``.
- counter ``r >= S C`` (fewer than ``C + k`` counters an epoch): a keyed permutation of the samples left
  (the blocks no slot took, then the ``n % k`` samples after the last whole block).

Each part is a bijection, so each epoch still holds every sample exactly once (invariant I7).  The order
is a different one from the full shuffle's (:mod:`.epochs`), hence part of the saved spec.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError, check_int
from .permute import ROUNDS, feistel_width, permute, permute_each
from .rng import round_keys

DOMAIN_BLOCKS = 0x626C6B73  # "blks": the keys of one epoch of a block shuffle
_MULTIPLIERS = (np.uint64(0x9E3779B97F4A7C15) * (2 * np.arange(ROUNDS, dtype=np.uint64) + 1)) | np.uint64(1)


@dataclass(frozen=True)
class BlockShuffle:
    """The locality shuffle: pass it as ``Loader(..., shuffle=BlockShuffle(block=16))``.

    ``block``: samples per block (consecutive samples of a source, read together: one request each);
    ``period``: the period ``P`` (default: the global batch size; under a schedule the greatest common
    divisor of its sizes); the I/O saving holds on every topology whose ``m W`` divides it, every
    guarantee on every topology; ``window``: blocks sharing one offset (1 = none), cutting how often a
    block recurs in the next global batch to about ``1/window`` at ``window`` times the memory.

    Every sample of a global batch of ``P`` positions comes from a different block (``window = 1``).
    Sources that do not shuffle (their own ``shuffle=False``) stay in order; a mix gives each source the
    period ``P`` times its share (exact where the share times ``P`` is a whole number and the mix's
    weights' denominators divide ``P``: docs/locality.md).

    Example::

        loader = datareel.Loader(data, global_batch_size=256, micro_batch_size=8,
                                 shuffle=datareel.BlockShuffle(block=16))
    """

    block: int = 16
    period: int | None = None
    window: int = 1

    def __post_init__(self) -> None:
        check_int(self.block, "block", minimum=1, maximum=1 << 20, where="BlockShuffle")
        check_int(self.window, "window", minimum=1, maximum=1 << 10, where="BlockShuffle")
        if self.period is not None:
            check_int(self.period, "period", minimum=1, maximum=1 << 40, where="BlockShuffle")
            check_super_period(self.block, self.window, self.period)

    def resolved(self, default_period: int) -> BlockShuffle:
        """These options with the period set (``default_period`` where none was given: the global batch size,
        or a schedule's common divisor)."""
        if self.period is None:
            check_super_period(self.block, self.window, default_period, given=False)
        return BlockShuffle(self.block, self.period if self.period is not None else default_period, self.window)

    def to_json(self) -> dict[str, Any]:
        """The saved spec's ``locality`` field (of resolved options)."""
        if self.period is None:
            raise OptionError("BlockShuffle.to_json() needs a resolved period: call resolved(G) first")
        return {"block": self.block, "period": self.period, "window": self.window}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BlockShuffle:
        return cls(int(value["block"]), int(value["period"]), int(value["window"]))


SUPER_PERIOD_LIMIT = 1 << 48
"""The most counters one super-period (``block × window × period``) may span: a process reading from a bucket
fetches the blocks one super-period ahead (:mod:`datareel.execute.ahead`), and those positions must stay
inside int64 with room to spare (2^48: 281 trillion samples, far past any dataset; a super-period longer
than a source has no whole slot and reads it in a plain keyed order anyway)."""


def check_super_period(block: int, window: int, period: int, *, given: bool = True) -> None:
    """Refuse options whose super-period ``block × window × period`` passes :data:`SUPER_PERIOD_LIMIT`, naming
    the values, the product, the limit and the largest period (and block) that would work."""
    span = block * window * period
    if span <= SUPER_PERIOD_LIMIT:
        return
    what = f"period={period}" if given else f"period=None (the global batch size here: {period})"
    largest = SUPER_PERIOD_LIMIT // (block * window)
    raise OptionError(
        f"BlockShuffle(block={block}, window={window}, {what}): block × window × period = {span:,} (about "
        f"2^{span.bit_length() - 1}) counters a super-period, more than the {SUPER_PERIOD_LIMIT:,} (2^48) the "
        f"reader's lookahead serves; give a period of at most {largest:,} with this block and window, or a "
        f"smaller block or window (block × window × period at most 2^48; a super-period about the size of a "
        f"source or less is the useful range)"
    )


@dataclass(frozen=True)
class BlockOrder:
    """One source's block order: ``block`` samples a block, ``window`` blocks a slot, ``period`` its own
    period in source counters (the loader's period times the source's share of positions)."""

    block: int
    period: int
    window: int


@functools.lru_cache(maxsize=4096)
def _keys(seed: int, source_key: int, epoch: int, part: int) -> np.ndarray:
    """Round keys of part ``part`` (0: blocks, 1: the rest, 2: slots) of one epoch. -> uint64[ROUNDS]."""
    return round_keys(DOMAIN_BLOCKS, seed, source_key, epoch, part)


def _slot_keys(base: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Each slot's own round keys: the epoch's, each xored with a distinct odd multiple of the slot number
    (the rounds' own mixing does the rest). base: uint64[ROUNDS]; slots: int64[k] -> uint64[k, ROUNDS]."""
    u = slots.astype(np.uint64)[:, None]  # (k, 1)
    keys: np.ndarray = base[None, :] ^ (u * _MULTIPLIERS[None, :])  # (k, ROUNDS)
    return keys


def epoch_indices(r: np.ndarray, n: int, order: BlockOrder, *, seed: int, source_key: int, epoch: int) -> np.ndarray:
    """Sample indices of counters ``r`` of one epoch (see the module doc).

    r: int64[k], each in [0, n) -> int64[k], each in [0, n); a bijection of [0, n).
    """
    k, w, P = order.block, order.window, order.period
    C = k * w * P
    blocks = n // k  # B: whole blocks
    structured = (n // C) * C  # S C
    used = (structured // C) * P * w  # blocks the slots take
    out = np.empty(r.shape, dtype=np.int64)
    head = r < structured  # (k,)
    if head.any():
        x = r[head]
        s, rest = np.divmod(x, C)
        t, o = np.divmod(rest, P)
        slot = s * P + o  # (h,)
        kw = k * w
        if w > 1:  # interleave the slot's blocks; one block a slot is read in shard order, one per period
            width = np.full(slot.shape, feistel_width(kw), dtype=np.uint64)
            sizes = np.full(slot.shape, kw, dtype=np.int64)
            q = permute_each(t, sizes, width, _slot_keys(_keys(seed, source_key, epoch, 2), slot))
        else:
            q = t
        block = permute(slot * w + q // k, blocks, _keys(seed, source_key, epoch, 0))
        out[head] = block * k + q % k
    tail = ~head
    if tail.any():
        z = permute(r[tail] - structured, n - structured, _keys(seed, source_key, epoch, 1))  # (t,)
        in_blocks = (blocks - used) * k  # samples of the blocks no slot took
        got = np.empty(z.shape, dtype=np.int64)
        left = z < in_blocks
        if left.any():
            got[left] = permute(used + z[left] // k, blocks, _keys(seed, source_key, epoch, 0)) * k + z[left] % k
        got[~left] = blocks * k + (z[~left] - in_blocks)
        out[tail] = got
    return out


def block_indices(j: np.ndarray, n: int, order: BlockOrder, *, seed: int, source_key: int) -> np.ndarray:
    """Sample indices of source counters ``j`` (epochs back to back). j: int64[k], each >= 0 -> int64[k]."""
    j = np.asarray(j, dtype=np.int64)
    epoch, offset = np.divmod(j, n)  # (k,), (k,)
    if epoch.size == 0:
        return offset
    first, last = int(epoch.min()), int(epoch.max())
    if first == last:  # the common case: a micro-batch inside one epoch
        return epoch_indices(offset, n, order, seed=seed, source_key=source_key, epoch=first)
    out = np.empty_like(offset)
    for e in np.unique(epoch).tolist():
        sel = epoch == e
        out[sel] = epoch_indices(offset[sel], n, order, seed=seed, source_key=source_key, epoch=int(e))
    return out
