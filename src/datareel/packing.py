"""Packing: the packed reel, planned from sample lengths in windows of the input reel.

Window ``w`` is input positions ``[w·window, (w+1)·window)``; its packs come
from first-fit-decreasing on those samples' lengths (see
:mod:`datareel.plan.pack`).  The packed reel is the concatenation of every
window's packs; a point in it is ``(window, offset)``, which is what the loader
state stores beside the packed cursor, so a restore plans one window, never
the windows before it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DatareelError
from .lengths import LengthSpec, check_spec, lengths_of
from .plan.pack import OVER_LENGTH, plan_window
from .plan.reel import ReelPlan
from .sources.base import Source

log = logging.getLogger("datareel")


@dataclass(frozen=True, kw_only=True)
class Packing:
    """Pack samples into sequences of at most ``max_length`` (pass to ``Loader(packing=...)``).

    - ``length``: where lengths come from: ``"index"`` (a length index made by
      ``datareel prepare --lengths``), ``"bytes"`` (bytes on disk), or
      ``fn(source, indices) -> lengths`` (vectorised, cheap).
    - ``window``: input positions planned together (larger packs tighter; a
      restore re-plans one window).
    - ``over_length``: a sample longer than ``max_length``: ``"error"``
      (default), ``"own_pack"`` (a pack of its own), ``"truncate"`` (a pack of
      its own, cut by the task encoder's ``truncate_sample(sample, max_length)``),
      or ``"drop"`` (left out, logged, counted in ``loader.dropped``).

    Example::

        loader = datareel.Loader(corpus, global_batch_size=64, micro_batch_size=4,
                                 packing=datareel.Packing(max_length=4096, length="index"),
                                 task_encoder=MyPacker())
    """

    max_length: int
    length: LengthSpec = "index"
    window: int = 1024
    over_length: str = "error"

    def __post_init__(self) -> None:
        for name in ("max_length", "window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DatareelError(f"Packing({name}={value!r}) must be a positive integer")
        check_spec(self.length, "Packing")
        if self.over_length not in OVER_LENGTH:
            raise DatareelError(f"Packing(over_length={self.over_length!r}) must be one of {list(OVER_LENGTH)}")

    def fingerprint(self) -> dict[str, Any]:
        length = self.length if isinstance(self.length, str) else getattr(self.length, "__qualname__", "function")
        return {"max_length": self.max_length, "window": self.window, "over_length": self.over_length,
                "length": length}


@dataclass(frozen=True)
class Pack:
    """One pack: its input reel positions with their leaves and indices, and which are over-long."""

    positions: np.ndarray
    source_ids: np.ndarray
    indices: np.ndarray
    truncate: np.ndarray


class PackedReel:
    """Plans windows on demand (a few cached) and streams packs from any ``(window, offset)``."""

    def __init__(self, plan: ReelPlan, sources: list[Source], packing: Packing, input_length: int | None):
        self.plan, self.sources, self.packing, self.input_length = plan, sources, packing, input_length
        self._cache: OrderedDict[int, list[Pack]] = OrderedDict()
        self.dropped = 0
        self.known_length: int | None = None  # packs in a finite reel, once planned to its end

    def windows(self) -> int | None:
        """Windows of a finite input reel (``None``: endless)."""
        if self.input_length is None:
            return None
        return -(-self.input_length // self.packing.window)

    def window(self, w: int) -> list[Pack]:
        if w in self._cache:
            self._cache.move_to_end(w)
            return self._cache[w]
        size = self.packing.window
        stop = (w + 1) * size if self.input_length is None else min((w + 1) * size, self.input_length)
        positions = np.arange(w * size, stop, dtype=np.int64)  # (k,)
        leaf, index = self.plan.resolve(positions)  # (k,), (k,)
        lengths = np.empty(len(positions), dtype=np.int64)
        for s in np.unique(leaf).tolist():
            mask = leaf == s
            lengths[mask] = lengths_of(self.sources[s], index[mask], self.packing.length)
        try:
            packs, dropped = plan_window(lengths, self.packing.max_length, self.packing.over_length)
        except DatareelError as exc:
            over = int(np.flatnonzero(lengths > self.packing.max_length)[0])
            raise DatareelError(
                f"{exc} (sample {int(index[over])} of source {self.sources[leaf[over]].name!r} at reel position "
                f"{int(positions[over])})"
            ) from None
        if dropped.size:
            self.dropped += int(dropped.size)
            log.warning("packing dropped %d over-long samples of window %d (max_length=%d): %s", dropped.size, w,
                        self.packing.max_length,
                        ", ".join(f"{self.sources[leaf[d]].name}[{int(index[d])}]@{int(positions[d])}" for d in dropped[:10]))
        over = lengths > self.packing.max_length
        out = [Pack(positions[p], leaf[p], index[p], over[p] & (self.packing.over_length == "truncate")) for p in packs]
        self._cache[w] = out
        if len(self._cache) > 8:
            self._cache.popitem(last=False)
        return out

    def stream(self, w: int, o: int) -> Iterator[tuple[Pack, tuple[int, int]]]:
        """Packs from ``(w, o)`` on, each with the ``(window, offset)`` just after it."""
        last = self.windows()
        while last is None or w < last:
            packs = self.window(w)
            while o < len(packs):
                o += 1
                yield packs[o - 1], ((w, o) if o < len(packs) else (w + 1, 0))
            w, o = w + 1, 0

    def length(self) -> int:
        """Packs in a finite reel (plans every window once)."""
        last = self.windows()
        if last is None:
            raise DatareelError("an endless packed reel has no length")
        if self.known_length is None:
            self.known_length = sum(len(self.window(w)) for w in range(last))
        return self.known_length
