"""Open files of a reading process, bounded: one least-recently-used set shared by every source.

A global shuffle touches every shard, so a reader that kept each shard it touched open would run
out of descriptors on a dataset of a few thousand shards under an ordinary ``ulimit -n``.  Formats
instead ask the local store for a file's handle (its open file and its index, made on first use by
the format's own ``opener``); at most ``DATAREEL_MAX_OPEN_SHARDS`` (default: a quarter of the
soft ``ulimit -n``, at most 1,024; see :func:`max_open`) stay open per process, across all sources,
and the least recently used one is closed to make room.  If opening one still finds no free
descriptor (``EMFILE``/``ENFILE``: the rest of the process holds more than the quarter left to it),
every handle of the set is closed and the open tried once more; if that fails too, a
:class:`~datareel.errors.StorageError` names the file, the cap, the limit and the fix.  Each process
(a DataLoader worker after fork) has its own set; handles inherited from the parent are closed in
the child, never used.  Threads of one process share the set: a reader uses a handle inside
:meth:`OpenShards.use`, which pins it, and a handle another thread evicts meanwhile is closed only when
its last use ends (threads x evictions: docs/guarantees.md).  (Objects in other stores hold no
descriptor: their handles are kept by their store, :class:`~datareel.storage.base.StoreFiles`.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import OptionError, StorageError
from .objects import ObjectInfo, Opened


class Descriptor:
    """A local file opened for reading: its descriptor."""

    def __init__(self, fd: int):
        self.fd = fd

    def info(self) -> ObjectInfo:
        return ObjectInfo(os.fstat(self.fd).st_size)

    def read_range(self, start: int, stop: int) -> bytes:
        return os.pread(self.fd, stop - start, start)

    def close(self) -> None:
        fd, self.fd = self.fd, -1  # a read after close fails (EBADF), never reads a file that reused the number
        try:
            os.close(fd)
        except OSError:
            pass


class Handle:
    """One opened object (a local descriptor, or an object in a store) and its offsets (read-only; mapped
    for a large local index). ``Handle(fd, index)`` takes a bare descriptor too.

    A handle is *pinned* while it is used (:meth:`pin` / :meth:`release`; :meth:`OpenShards.use` pins it
    under the set's lock): :meth:`close` on a pinned handle (an eviction by another thread) only marks it,
    and the last :meth:`release` closes it, so neither its descriptor nor its index goes from under a read."""

    def __init__(self, opened: Opened | int, index: np.ndarray):
        self.opened: Any = Descriptor(opened) if isinstance(opened, int) else opened
        self.index = index  # uint64[count + 1]
        self._pins = 0
        self._closing = False
        self._lock = threading.Lock()

    @property
    def fd(self) -> int:
        """The local descriptor (``-1`` for an object in a store)."""
        return getattr(self.opened, "fd", -1)

    def read_range(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (fewer where the object ends sooner)."""
        return self.opened.read_range(start, stop)

    def pin(self) -> bool:
        """Hold the handle open for a use (-> ``True``); ``False`` if it was closed already (not pinned)."""
        with self._lock:
            if self._closing:
                return False
            self._pins += 1
            return True

    def release(self) -> None:
        """End a use begun by :meth:`pin`; the last one closes a handle that was closed meanwhile."""
        with self._lock:
            self._pins -= 1
            last = self._closing and not self._pins
        if last:
            self._close_now()

    def close(self) -> None:
        """Close the object and drop the index now, or (pinned: in use by another thread) when its last use
        ends. The map itself goes when no array uses it any more (closing it here could pull the pages from
        under a view still held)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            now = not self._pins
        if now:
            self._close_now()

    def _close_now(self) -> None:
        self.opened.close()
        self.index = np.empty(0, dtype=np.uint64)


ENV_MAX_OPEN = "DATAREEL_MAX_OPEN_SHARDS"
#: An open that fails with one of these found no free descriptor (the process's, or the system's, table is full).
NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})


def max_open() -> int:
    """Shards one process keeps open at a time: ``DATAREEL_MAX_OPEN_SHARDS``, by default a quarter of the
    process's soft descriptor limit (``ulimit -n``, RLIMIT_NOFILE) and at most 1,024: 64 under ``ulimit -n 256``,
    256 under the common 1,024, 4 under 16 (at least 1). Each holds 1 descriptor (2 where its index is mapped),
    so half the limit or more is left to the rest of the process (torch, sockets, the pipes of DataLoader
    workers). A shard opened again after eviction costs a few system calls per read, so the set should hold
    the shards a shuffle touches where the limit allows."""
    value = os.environ.get(ENV_MAX_OPEN)
    if value is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return 1024 if soft == resource.RLIM_INFINITY else max(1, min(1024, soft // 4))
    if not (value.isascii() and value.isdecimal()) or not 1 <= int(value) <= 65536:  # ASCII digits only
        raise OptionError(
            f"{ENV_MAX_OPEN}={value!r} must be a whole number from 1 to 65536 (shards each reading "
            f"process keeps open; each holds 1 descriptor, 2 where its index is mapped)"
        )
    return int(value)


def no_descriptor(path: str, exc: OSError, capacity: int) -> StorageError:
    """The error for a file that could not be opened for want of a descriptor, even with every shard handle
    of the process closed: names the file, the cap, the soft and hard limits, and the fixes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limits = f"{soft}" + ("" if hard == soft else f" (hard limit {'unlimited' if hard < 0 else hard})")
    cap = f"{ENV_MAX_OPEN}={os.environ[ENV_MAX_OPEN]}" if ENV_MAX_OPEN in os.environ else "its default"
    table = "the system's open-file table is full (ENFILE)" if exc.errno == errno.ENFILE else "no descriptor is free"
    return StorageError(
        f"cannot open {path}: {table} ([Errno {exc.errno}] {exc.strerror}), even with every shard this process "
        f"held open closed; the process may hold {limits} open files (`ulimit -n`, RLIMIT_NOFILE) and keeps up to "
        f"{capacity} shards open ({cap}). Raise the limit (`ulimit -n 65536` in the shell that starts training, "
        f"or resource.setrlimit(RLIMIT_NOFILE) up to the hard limit), lower num_workers, or set a smaller "
        f"{ENV_MAX_OPEN}; something else in the process may also be holding descriptors"
    )


class OpenShards:
    """A least-recently-used set of :class:`Handle` keyed by file path."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.opened = 0  # handles opened in this process (reopens after eviction included), for tests and figures
        self._open: OrderedDict[str, Handle] = OrderedDict()
        self._lock = threading.RLock()  # threads of one process may read too

    def get(self, path: str, opener: Callable[[], Handle]) -> Handle:
        """The handle of ``path``, opened by ``opener`` if it is not open. Not pinned: another thread's ``get``
        may close it (its descriptor, and its index with it) at once, so read it inside :meth:`use` (or
        while :meth:`held`); an index array taken there stays valid after."""
        with self._lock:
            handle = self._open.get(path)
            if handle is not None:
                self._open.move_to_end(path)
                return handle
            while len(self._open) >= self.capacity:
                self._open.popitem(last=False)[1].close()
            try:
                handle = opener()
            except OSError as exc:
                if exc.errno not in NO_DESCRIPTOR:
                    raise
                self.close_all()  # the table is full (our handles count too): free ours, try once more
                try:
                    handle = opener()
                except OSError as again:
                    if again.errno not in NO_DESCRIPTOR:
                        raise
                    raise no_descriptor(path, again, self.capacity) from again
            self._open[path] = handle
            self.opened += 1
            return handle

    @contextlib.contextmanager
    def use(self, path: str, opener: Callable[[], Handle]) -> Iterator[Handle]:
        """The handle of ``path`` (opened by ``opener`` if it is not open), pinned while the ``with`` block
        runs: another thread's eviction takes it out of the set but closes it only when the block ends, so
        its descriptor and index may be read there, without the set's lock (threads read at once). A handle
        evicted while in use still holds its descriptor: the process holds at most the cap plus one per
        thread reading at that moment."""
        with self._lock:
            handle = self.get(path, opener)
            if not handle.pin():  # under the lock: no eviction came between get and pin, so it was closed
                # outside the set (a direct close()): drop the stale entry and open the shard afresh
                if self._open.get(path) is handle:
                    del self._open[path]
                handle = self.get(path, opener)
                if not handle.pin():
                    raise StorageError(
                        f"cannot read {path}: its opener returned a handle that is closed already; an opener "
                        f"passed to OpenShards must return a newly opened Handle"
                    )
        try:
            yield handle
        finally:
            handle.release()

    def peek(self, path: str) -> Handle | None:
        """The handle of ``path`` if it is open (no I/O). Not pinned: another thread may close it at once
        (its index then reads empty); use :meth:`use` to read it."""
        return self._open.get(path)

    def put(self, path: str, handle: Handle) -> Handle:
        """Keep ``handle`` (just opened and checked) as the handle of ``path``, closing the one it replaces."""
        with self._lock:
            old = self._open.pop(path, None)
            if old is not None and old is not handle:
                old.close()
            while len(self._open) >= self.capacity:
                self._open.popitem(last=False)[1].close()
            self._open[path] = handle
            self.opened += 1
            return handle

    def pread(self, path: str, opener: Callable[[], Handle], size: int, offset: int) -> bytes:
        """``size`` bytes of ``path`` at ``offset`` (no other thread can close the descriptor meanwhile)."""
        with self.use(path, opener) as handle:
            return handle.read_range(offset, offset + size)

    def held(self) -> threading.RLock:
        """The set's lock: while it is held (``with shards.held():``) no other thread of this process can
        close a handle, so a handle from :meth:`get` may be read directly."""
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
                handle._close_now()  # the parent's threads (and their pins) are not in this process
        _PER_PROCESS.clear()
        found = _PER_PROCESS[pid] = OpenShards(max_open())
    return found
