"""The packed reel: packs planned from sample lengths in windows of the input reel.

Window ``w`` is input positions ``[w·window, (w+1)·window)``; its packs come
from first-fit-decreasing on those samples' lengths (see
:mod:`datareel.plan.pack`).  The packed reel is the concatenation of every
window's packs; a point in it is ``(window, offset)``, which the cursor keeps
beside the packed position, so a restore plans one window, never the windows
before it.  Every rank walks the same pack stream and keeps its own ``m``
packs of each micro-step (the layout of :mod:`datareel.plan.layout`, applied
to packs).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DatareelError
from ..plan.layout import Layout, origin
from ..plan.nodes import ReelPlan
from ..plan.pack import plan_window
from ..sources.base import Source
from ..sources.lengths import lengths_of
from .base import Descriptor, Step
from .cursor import Cursor
from .packing import Packing

log = logging.getLogger("datareel")
CACHED_WINDOWS = 8


@dataclass(frozen=True)
class Pack:
    """One pack: its input reel positions with their leaves and indices, and which are over-long.

    positions: int64[j], source_ids: int32[j], indices: int64[j], truncate: bool[j] (j >= 1).  In a
    windowed stage ``outputs`` says which output of each position's ``encode_sample`` it holds.
    """

    positions: np.ndarray
    source_ids: np.ndarray
    indices: np.ndarray
    truncate: np.ndarray
    outputs: np.ndarray | None = None  # int64[j]: which output of each position's encoder (windowed stage)


def window_inputs(
    plan: ReelPlan, size: int, pass_length: int | None, w: int, *, whole: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window ``w``'s input positions, leaves and indices for windows of ``size`` positions: int64[k], int32[k],
    int64[k] (cut at the end of a finite pass of ``pass_length`` unless ``whole``)."""
    stop = (w + 1) * size if pass_length is None or whole else min((w + 1) * size, pass_length)
    positions = np.arange(w * size, stop, dtype=np.int64)
    leaf, index = plan.resolve(positions)
    return positions, leaf, index


class PackedReel:
    """Plans windows on demand (a few cached) and streams micro-steps of packs from any cursor.

    ``pass_length``: input positions of one ``repeat=False`` pass (``None``: endless).
    """

    def __init__(self, plan: ReelPlan, sources: list[Source], packing: Packing, pass_length: int | None):
        self.plan, self.sources, self.packing, self.pass_length = plan, sources, packing, pass_length
        self.window_size = packing.window
        self._cache: OrderedDict[int, list[Pack]] = OrderedDict()
        self._dropped: dict[int, int] = {}  # window -> samples it dropped (windows with drops only), counted once
        self._packs_in_pass: int | None = None
        self._digest: str | None = None
        self._fits: bool | None = None  # whether any sample fits max_length (asked only if packs stop coming)

    # -- the Reel protocol ------------------------------------------------------------------------
    def start(self) -> Cursor:
        return Cursor(0, (0, 0))

    @property
    def dropped(self) -> int:
        return sum(self._dropped.values())

    def length(self) -> int | None:
        """Packs in one finite pass (plans every window once; only ``len()`` needs it)."""
        last = self.windows()
        if last is None:
            return None
        if self._packs_in_pass is None:
            self._packs_in_pass = sum(len(self.window(w)) for w in range(last))
        return self._packs_in_pass

    def spec(self) -> dict[str, Any]:
        return {"packing": self.packing.fingerprint(self._length_digest())}

    def bound(self) -> int | None:
        return self.pass_length  # a pack holds at least one input sample

    def at_end(self, cursor: Cursor) -> bool:
        last = self.windows()
        return last is not None and cursor.pack is not None and cursor.pack[0] >= last

    def check(self, cursor: Cursor, layout: Layout) -> None:
        if cursor.pack is None:
            raise DatareelError(
                "the state has no pack=[window, offset] although this loader packs; the state is damaged"
            )
        w, o = cursor.pack
        last = self.windows()
        if last is not None and w >= last:
            if (w, o) != (last, 0):
                raise DatareelError(
                    f"state pack={[w, o]} lies beyond this repeat=False pass ({last} windows of "
                    f"{self.window_size}); it was saved by a loader with repeat=True: restore it into one"
                )
            return  # the end of a pass resumes on any layout
        layout.check_cursor(cursor.position)
        packs = len(self.window(w))
        if o and o >= packs:
            raise DatareelError(
                f"state pack={[w, o]}: window {w} holds {packs} packs, so offset {o} does not exist; "
                f"the state is damaged, or the lengths behind the packing changed since it was saved"
            )

    def stream(self, start: Cursor, layout: Layout, rank: int) -> Iterator[Step]:
        if start.pack is None:
            raise DatareelError("internal: a packed stream needs a cursor with pack=(window, offset)")
        last = self.windows()
        if last is not None and start.pack[0] >= last:
            return  # already at the end of the pass
        S, end = layout.step_size, (last or 0, 0)
        packs = self._packs_from(*start.pack)
        ahead = list(itertools.islice(packs, 1))  # one pack of look-ahead: is there a next step at all?
        if not ahead:  # only empty windows were left: this is the end of the pass
            yield Step(None, Cursor(start.position, end))
            return
        o = origin(start.position, S)  # steps are the blocks [o + s S, o + (s + 1) S) of packs
        for step in itertools.count((start.position - o) // S):
            group = ahead + list(itertools.islice(packs, S - 1))  # this micro-step's packs, all ranks
            ahead = list(itertools.islice(packs, 1))
            base = o + step * S
            ends = not ahead  # a finite pass ends with this step (also when trailing windows hold no pack)
            after = Cursor(base + len(group), end if ends else group[-1][1])
            a, b = layout.rank_span(step, rank, base + len(group) if ends else None, o)
            mine = [pack for pack, _ in group[a - base : b - base]]
            yield Step(self._descriptor(step, mine, a, b) if mine else None, after)
            if ends:
                return

    # -- windows ----------------------------------------------------------------------------------
    def windows(self) -> int | None:
        """Windows of a finite input reel (``None``: endless)."""
        if self.pass_length is None:
            return None
        return -(-self.pass_length // self.window_size)

    def _window_positions(self, w: int, *, whole: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Window ``w``'s input positions, leaves and indices: int64[k], int32[k], int64[k] (cut at the end of a
        finite pass unless ``whole``)."""
        return window_inputs(self.plan, self.window_size, self.pass_length, w, whole=whole)

    def _inputs(self, w: int, *, whole: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Window ``w``'s input positions, leaves, indices and lengths: int64[k], int32[k], int64[k], int64[k]."""
        positions, leaf, index = self._window_positions(w, whole=whole)
        lengths = np.empty(len(positions), dtype=np.int64)
        for s in np.unique(leaf).tolist():
            mask = leaf == s
            lengths[mask] = lengths_of(self.sources[s], index[mask], self.packing.length)
        return positions, leaf, index, lengths

    def window(self, w: int) -> list[Pack]:
        """The packs of window ``w``, in order (possibly none: all its samples dropped)."""
        if w in self._cache:
            self._cache.move_to_end(w)
            return self._cache[w]
        positions, leaf, index, lengths = self._inputs(w)
        try:
            plans, dropped = plan_window(lengths, self.packing.max_length, self.packing.over_length)
        except DatareelError as exc:
            over = int(np.flatnonzero(lengths > self.packing.max_length)[0])
            raise DatareelError(
                f"{exc} (sample {int(index[over])} of source {self.sources[leaf[over]].name!r} at reel position "
                f"{int(positions[over])})"
            ) from None
        if dropped.size and w not in self._dropped:
            log.warning(
                "packing dropped %d over-long samples of window %d (max_length=%d): %s",
                dropped.size,
                w,
                self.packing.max_length,
                ", ".join(f"{self.sources[leaf[d]].name}[{int(index[d])}]@{int(positions[d])}" for d in dropped[:10]),
            )
        if dropped.size:
            self._dropped[w] = int(dropped.size)
        truncate = (lengths > self.packing.max_length) & (self.packing.over_length == "truncate")
        out = [Pack(positions[p], leaf[p], index[p], truncate[p]) for p in plans]
        self._cache[w] = out
        if len(self._cache) > CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return out

    def _packs_from(self, w: int, o: int) -> Iterator[tuple[Pack, tuple[int, int]]]:
        """Packs from ``(w, o)`` on, each with the ``(window, offset)`` just after it."""
        last = self.windows()
        empty = 0  # consecutive windows without a pack
        while last is None or w < last:
            packs = self.window(w)
            empty = 0 if packs else empty + 1
            if last is None and empty * self.window_size > self._empty_limit():
                self._no_progress(empty, w)
            while o < len(packs):
                o += 1
                yield packs[o - 1], ((w, o) if o < len(packs) else (w + 1, 0))
            w, o = w + 1, 0

    def _empty_limit(self) -> int:
        """Input positions without a pack after which an endless reel checks that any sample fits at all:
        four passes of the reel (of every source, for a weighted mix), at most 65,536, at least a window."""
        passes = self.plan.epoch_length or sum(len(source) for source in self.sources)
        return max(self.window_size, min(65_536, 4 * passes))

    def _no_progress(self, empty: int, w: int) -> None:
        """Called while ``empty`` consecutive windows up to ``w`` held no pack: raise if none ever will."""
        if not self._some_sample_fits():
            raise DatareelError(
                f"packing dropped every sample of {empty} consecutive windows (up to reel position "
                f"{(w + 1) * self.window_size}), and no sample of any source is <= max_length="
                f"{self.packing.max_length}: this endless reel would never yield a pack; raise max_length, "
                f"or use over_length='own_pack' or 'truncate'"
            )

    def _some_sample_fits(self) -> bool:
        """Whether any sample of any source is <= max_length (computed once: every source's lengths)."""
        if self._fits is None:
            self._fits = any(
                bool(
                    (
                        lengths_of(source, np.arange(len(source), dtype=np.int64), self.packing.length)
                        <= self.packing.max_length
                    ).any()
                )
                for source in self.sources
            )
        return self._fits

    def _length_digest(self) -> str | None:
        """A digest of a length function's output over the first window (``None`` for index / bytes)."""
        if not callable(self.packing.length):
            return None
        if self._digest is None:
            lengths = self._inputs(0, whole=True)[3]  # the same with repeat=True and repeat=False
            self._digest = hashlib.blake2b(lengths.astype("<i8").tobytes(), digest_size=8).hexdigest()
        return self._digest

    def _descriptor(self, step: int, mine: list[Pack], first: int, stop: int) -> Descriptor:
        """One rank's packs of a micro-step as a descriptor; they hold packed positions ``[first, stop)``."""
        return Descriptor(
            step,
            np.concatenate([p.positions for p in mine]),
            np.concatenate([p.source_ids for p in mine]),
            np.concatenate([p.indices for p in mine]),
            pack_sizes=np.array([len(p.positions) for p in mine], dtype=np.int64),
            packed_positions=np.arange(first, stop, dtype=np.int64),
            truncate=np.concatenate([p.truncate for p in mine]),
        )
