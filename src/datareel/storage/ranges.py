"""How a micro-batch's byte ranges become requests: :func:`coalesce` groups the ranges of one object into
GETs, :func:`concurrency` says how many GETs one process keeps in flight."""

from __future__ import annotations

import os

import numpy as np

from ..errors import OptionError

#: Ranges of one object at most this many bytes apart are fetched by one GET (the gap is read and dropped).
COALESCE_GAP = 64 << 10
#: ... as long as the merged GET stays at most this long.
COALESCE_LIMIT = 16 << 20
#: GETs in flight per process when ``DATAREEL_REMOTE_CONCURRENCY`` is not set.
DEFAULT_CONCURRENCY = 8


def coalesce(starts: np.ndarray, stops: np.ndarray, gap: int = COALESCE_GAP, limit: int = COALESCE_LIMIT) -> np.ndarray:
    """Group byte ranges of one object into GETs: ranges sorted by start, a new GET wherever the next
    range begins more than ``gap`` bytes after the current GET's end or would make it longer than
    ``limit``. starts, stops: int64[k] -> group number of each range int64[k] (0-based, in start order)."""
    order = np.argsort(starts, kind="stable")  # (k,)
    group = np.empty(len(starts), dtype=np.int64)
    current, first, end = -1, 0, -1
    for i in order.tolist():  # k is one micro-batch: a plain loop over it is cheap
        start, stop = int(starts[i]), int(stops[i])
        if current < 0 or start > end + gap or max(end, stop) - first > limit:
            current, first, end = current + 1, start, stop
        else:
            end = max(end, stop)
        group[i] = current
    return group


def gets_of(ranges: list[tuple[int, int]]) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """The GETs that fetch ``ranges`` of one object (:func:`coalesce`): ``(start, stop, its ranges)`` each."""
    starts = np.array([r[0] for r in ranges], dtype=np.int64)  # (k,)
    stops = np.array([r[1] for r in ranges], dtype=np.int64)  # (k,)
    group = coalesce(starts, stops)  # (k,)
    out = []
    for g in range(int(group.max()) + 1):
        members = [ranges[i] for i in np.flatnonzero(group == g).tolist()]
        out.append((min(r[0] for r in members), max(r[1] for r in members), members))
    return out


def concurrency() -> int:
    """Ranged GETs one process keeps in flight for a micro-batch: ``DATAREEL_REMOTE_CONCURRENCY`` (default 8)."""
    value = os.environ.get("DATAREEL_REMOTE_CONCURRENCY", str(DEFAULT_CONCURRENCY))
    if not (value.isascii() and value.isdecimal()) or not 1 <= int(value) <= 256:  # ASCII digits only
        raise OptionError(
            f"DATAREEL_REMOTE_CONCURRENCY={value!r} must be a whole number from 1 to 256 (GETs in flight per process)"
        )
    return int(value)
