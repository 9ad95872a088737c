"""Open files of a reading process, bounded: one least-recently-used set shared by every source.

A global shuffle touches every shard, so a reader that kept each shard it touched open would run
out of descriptors on a dataset of a few thousand shards under an ordinary ``ulimit -n``.  Sources
instead ask :func:`handles` for a shard's handle (its open file and mapped index, made on first use
by the source's own ``opener``); at most ``DATAREEL_MAX_OPEN_SHARDS`` (default 64) stay open per
process, across all sources, and the least recently used one is closed to make room.  Each process
(a DataLoader worker after fork) has its own set; handles inherited from the parent are closed in
the child, never used.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import OptionError


@dataclass
class Handle:
    """One open shard or JSONL file: its descriptor and its offsets (a read-only map)."""

    fd: int
    index: np.ndarray  # uint64[count + 1]

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        mapped = getattr(self.index, "_mmap", None)
        self.index = np.empty(0, dtype=np.uint64)
        if mapped is not None:  # the map's own descriptor closes with it (unless a caller still holds a view)
            try:
                mapped.close()
            except (BufferError, ValueError):
                pass


def max_open() -> int:
    """Shards one process keeps open at a time: ``DATAREEL_MAX_OPEN_SHARDS`` (default 64)."""
    value = os.environ.get("DATAREEL_MAX_OPEN_SHARDS", "64")
    if not value.isdigit() or not 1 <= int(value) <= 65536:
        raise OptionError(
            f"DATAREEL_MAX_OPEN_SHARDS={value!r} must be a whole number from 1 to 65536 (shards each reading "
            f"process keeps open; each holds 2 descriptors)"
        )
    return int(value)


class OpenShards:
    """A least-recently-used set of :class:`Handle` keyed by file path."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.opened = 0  # handles opened in this process (reopens after eviction included), for tests and figures
        self._open: OrderedDict[str, Handle] = OrderedDict()

    def get(self, path: str, opener: Callable[[], Handle]) -> Handle:
        handle = self._open.get(path)
        if handle is not None:
            self._open.move_to_end(path)
            return handle
        while len(self._open) >= self.capacity:
            self._open.popitem(last=False)[1].close()
        handle = self._open[path] = opener()
        self.opened += 1
        return handle

    def __len__(self) -> int:
        return len(self._open)

    def close_all(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


_PER_PROCESS: dict[int, OpenShards] = {}


def handles() -> OpenShards:
    """This process's open shards (a forked child closes what it inherited and starts empty)."""
    pid = os.getpid()
    found = _PER_PROCESS.get(pid)
    if found is None:
        for inherited in _PER_PROCESS.values():
            inherited.close_all()
        _PER_PROCESS.clear()
        found = _PER_PROCESS[pid] = OpenShards(max_open())
    return found
