"""Open files of a reading process, bounded: one least-recently-used set shared by every source.

A global shuffle touches every shard, so a reader that kept each shard it touched open would run
out of descriptors on a dataset of a few thousand shards under an ordinary ``ulimit -n``.  Sources
instead ask :func:`handles` for a shard's handle (its open file and its index, made on first use
by the source's own ``opener``); at most ``DATAREEL_MAX_OPEN_SHARDS`` (default: a quarter of
``ulimit -n``, 16 to 1,024; see :func:`max_open`) stay open per process, across all sources, and the
least recently used one is closed to make room.  Each process
(a DataLoader worker after fork) has its own set; handles inherited from the parent are closed in
the child, never used.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import OptionError
from .index_files import read_index


@dataclass
class Handle:
    """One open shard or JSONL file: its descriptor and its offsets (read-only; mapped for a large index)."""

    fd: int
    index: np.ndarray  # uint64[count + 1]

    def close(self) -> None:
        """Close the descriptor and drop the index; the map itself goes when no array uses it any more
        (closing it here could pull the pages from under a view still held)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.index = np.empty(0, dtype=np.uint64)


def open_handle(path: str, check: Callable[[int, np.ndarray], None] | None = None) -> Handle:
    """Open ``path`` and read its ``.idx`` (:func:`read_index`); ``check(fd, index)`` may refuse them (the
    descriptor is closed then, as on any failure)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        index = read_index(f"{path}.idx")
        if check is not None:
            check(fd, index)
    except BaseException:
        os.close(fd)
        raise
    return Handle(fd, index)


def max_open() -> int:
    """Shards one process keeps open at a time: ``DATAREEL_MAX_OPEN_SHARDS``, by default a quarter of the
    process's descriptor limit (``ulimit -n``), at least 16 and at most 1,024: 64 under ``ulimit -n 256``,
    256 under the common 1,024. A shard opened again after eviction costs a few system calls per read,
    so the set should hold the shards a shuffle touches where the limit allows."""
    value = os.environ.get("DATAREEL_MAX_OPEN_SHARDS")
    if value is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return 1024 if soft == resource.RLIM_INFINITY else max(16, min(1024, soft // 4))
    if not value.isdigit() or not 1 <= int(value) <= 65536:
        raise OptionError(
            f"DATAREEL_MAX_OPEN_SHARDS={value!r} must be a whole number from 1 to 65536 (shards each reading "
            f"process keeps open; each holds 1 descriptor, 2 where its index is mapped)"
        )
    return int(value)


class OpenShards:
    """A least-recently-used set of :class:`Handle` keyed by file path."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.opened = 0  # handles opened in this process (reopens after eviction included), for tests and figures
        self._open: OrderedDict[str, Handle] = OrderedDict()
        self._lock = threading.RLock()  # threads of one process may read too

    def get(self, path: str, opener: Callable[[], Handle]) -> Handle:
        """The handle of ``path``, opened by ``opener`` if it is not open. Its ``index`` may be kept; its
        ``fd`` must not (another ``get`` may close it): read through :meth:`pread`."""
        with self._lock:
            handle = self._open.get(path)
            if handle is not None:
                self._open.move_to_end(path)
                return handle
            while len(self._open) >= self.capacity:
                self._open.popitem(last=False)[1].close()
            handle = self._open[path] = opener()
            self.opened += 1
            return handle

    def pread(self, path: str, opener: Callable[[], Handle], size: int, offset: int) -> bytes:
        """``size`` bytes of ``path`` at ``offset`` (no other thread can close the descriptor meanwhile)."""
        with self._lock:
            return os.pread(self.get(path, opener).fd, size, offset)

    def held(self) -> threading.RLock:
        """The set's lock: while it is held (``with shards.held():``) no other thread of this process can
        close a handle, so a handle from :meth:`get` may be read through its ``fd`` directly."""
        return self._lock

    def __len__(self) -> int:
        return len(self._open)

    def close_all(self) -> None:
        with self._lock:
            while self._open:
                self._open.popitem()[1].close()


_PER_PROCESS: dict[int, OpenShards] = {}


def handles() -> OpenShards:
    """This process's open shards (a forked child closes what it inherited and starts empty)."""
    pid = os.getpid()
    found = _PER_PROCESS.get(pid)
    if found is None:
        for inherited in _PER_PROCESS.values():  # not through its lock: a thread may have held it at fork
            for handle in inherited._open.values():
                handle.close()
        _PER_PROCESS.clear()
        found = _PER_PROCESS[pid] = OpenShards(max_open())
    return found
