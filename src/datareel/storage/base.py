"""What a store is to datareel: the :class:`Files` protocol each URL scheme's reader implements, and
:class:`StoreFiles`, a base class that builds all of it from two operations.

A store answers in bytes only: how big an object is (and its ETag), a byte range of it, several ranges
at once (:meth:`Files.read_ranges`, one micro-batch), the whole of a small one, a listing, a write.  What
the bytes mean (a tar shard, an index, a JSONL line) is for :mod:`datareel.formats`.  A format's reader
opens an object once per process and keeps a handle to it (the opened object and what the format read
for it, its offsets) in the :class:`HandleCache` its store gives it (:meth:`Files.handle_cache`); the
store decides how long handles are kept: the local file system in the process's bounded set of open
files, shared by every reader (:mod:`.handles`); other stores, whose opened objects hold no descriptor,
for the reader's life in the process.

A new scheme subclasses :class:`StoreFiles` and implements ``info`` and ``read_range`` (``list``,
``write`` and ``delete`` where ``datareel prepare`` should write into it), then registers a factory with
:func:`datareel.storage.register_scheme`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from ..errors import AccessDenied, DatasetChangedError, DatasetError, NotFound, OptionError
from .handles import Handle
from .objects import ObjectInfo, Opened

T = TypeVar("T")
Range = tuple[str, int, int]
"""``(url, start, stop)``: bytes ``[start, stop)`` of the object at ``url``."""


class Files(Protocol):
    """The operations formats and ``prepare`` need from a store, by URL (or local path)."""

    #: Whether announcing a micro-batch's ranges (:meth:`read_ranges`) saves time: a store with a cost
    #: per request. Sources tell the loader so with their own ``prefetches``.
    prefetches: bool

    def info(self, path: str) -> ObjectInfo:
        """Size (and ETag); raises :class:`~datareel.errors.NotFound` naming ``path`` if missing."""
        ...

    def exists(self, path: str) -> bool: ...

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, exactly ``stop - start`` of them, or a DatasetError naming ``path``."""
        ...

    def read_ranges(self, wanted: Sequence[Range]) -> dict[Range, bytes]:
        """Many ranges at once (one micro-batch); a range that failed is left out (its reader reads it alone)."""
        ...

    def read(self, path: str) -> bytes:
        """The whole object (for metadata and index files)."""
        ...

    def view(self, path: str, map_from: int | None = None) -> Any:
        """The whole object as a buffer: memory-mapped where the store can and it has ``map_from`` bytes or more."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write the whole object; visible to readers only once complete."""
        ...

    def list(self, prefix: str) -> list[str]:
        """URLs of the objects under the directory ``prefix``, sorted."""
        ...

    def delete(self, path: str) -> None: ...

    def download(self, path: str, target: str) -> None:
        """Copy the object to the local file ``target`` (``list``, ``write``, ``delete`` and ``download``:
        only for ``datareel prepare`` into the store)."""
        ...

    def open(self, path: str) -> Opened: ...

    def handle_cache(self) -> HandleCache:
        """Where one reader keeps its handles in this process (see the module doc): call it once per reader
        and process, and keep what it gives."""
        ...

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
        """``call(item)`` for each item (concurrently where the store gains by it), in order; an item whose
        call raised a :class:`~datareel.errors.DatasetError` gives that error instead."""
        ...


class HandleCache(Protocol):
    """Handles of opened objects by path, made on first use by the reader's ``opener``."""

    def get(self, path: str, opener: Callable[[], Handle]) -> Handle:
        """The handle of ``path``, made by ``opener`` if there is none; its ``index`` may be kept."""
        ...

    def use(self, path: str, opener: Callable[[], Handle]) -> AbstractContextManager[Handle]:
        """The handle of ``path`` (made by ``opener`` if there is none), never closed while the block runs."""
        ...

    def peek(self, path: str) -> Handle | None:
        """The handle of ``path`` if there is one already (no I/O)."""
        ...

    def put(self, path: str, handle: Handle) -> Handle:
        """Keep ``handle`` (opened and checked just now) as the handle of ``path``, replacing any other."""
        ...

    def held(self) -> AbstractContextManager[Any]:
        """While held, no handle is closed by another thread (read one's bytes directly)."""
        ...


#: Failures of a first open that a store with a cost per request remembers for the process: permanent.
PERMANENT = (NotFound, AccessDenied, DatasetChangedError)


class _InStore:
    """An object of a :class:`StoreFiles` opened for reading: no descriptor, its size asked for once."""

    def __init__(self, files: StoreFiles, path: str):
        self.files, self.path = files, path
        self._info: ObjectInfo | None = None

    def info(self) -> ObjectInfo:
        if self._info is None:
            self._info = self.files.info(self.path)
        return self._info

    def read_range(self, start: int, stop: int) -> bytes:
        return self.files.read_range(self.path, start, stop)

    def close(self) -> None:
        return None


class KeptHandles:
    """A reader's handles of objects in a store, kept for its life in the process (they hold no descriptor:
    an object's offsets, 8 bytes per sample).  A first open that failed for good (missing, denied, changed)
    is remembered and raised again without asking the store: a missing shard costs one request per
    process, not one per sample."""

    def __init__(self) -> None:
        self._kept: dict[str, Handle] = {}
        self._failed: dict[str, DatasetError] = {}
        self._lock = threading.Lock()

    def get(self, path: str, opener: Callable[[], Handle]) -> Handle:
        with self._lock:
            found = self._kept.get(path)
            error = self._failed.get(path)
        if found is not None:
            return found
        if error is not None:
            raise type(error)(str(error))
        try:  # not under the lock: first opens of many objects run concurrently (Files.each)
            made = opener()
        except PERMANENT as exc:  # transient failures are retried by the next read
            with self._lock:
                self._failed[path] = exc
            raise
        with self._lock:
            return self._kept.setdefault(path, made)

    def use(self, path: str, opener: Callable[[], Handle]) -> AbstractContextManager[Handle]:
        return contextlib.nullcontext(self.get(path, opener))  # kept for the reader's life: never closed

    def peek(self, path: str) -> Handle | None:
        return self._kept.get(path)

    def put(self, path: str, handle: Handle) -> Handle:
        with self._lock:
            self._failed.pop(path, None)
            self._kept[path] = handle
        return handle

    def held(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()


def each_in_turn(call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
    """``call`` on each item in this thread, in order: its result, or the :class:`DatasetError` it raised
    (what :meth:`Files.each` answers, for a store with nothing to gain from concurrency)."""
    out: list[T | DatasetError] = []
    for item in items:
        try:
            out.append(call(item))
        except DatasetError as exc:
            out.append(exc)
    return out


class StoreFiles:
    """:class:`Files` from ``info`` and ``read_range``: the rest has defaults a store may override (a
    store with a cost per request overrides ``read_ranges`` and ``each`` to fetch concurrently, and sets
    ``prefetches``)."""

    prefetches = False

    def info(self, path: str) -> ObjectInfo:
        raise NotImplementedError

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except NotFound:
            return False
        return True

    def read(self, path: str) -> bytes:
        return self.read_range(path, 0, self.info(path).size)

    def view(self, path: str, map_from: int | None = None) -> Any:
        return self.read(path)

    def read_ranges(self, wanted: Sequence[Range]) -> dict[Range, bytes]:
        out: dict[Range, bytes] = {}
        for item, got in zip(wanted, self.each(lambda job: self.read_range(*job), list(wanted))):
            if not isinstance(got, DatasetError):
                out[item] = got
        return out

    def each(self, call: Callable[[Any], T], items: Sequence[Any]) -> list[T | DatasetError]:
        return each_in_turn(call, items)

    def write(self, path: str, data: bytes) -> None:
        raise OptionError(f"{path}: the store of this URL scheme ({type(self).__name__}) does not take writes")

    def delete(self, path: str) -> None:
        raise OptionError(f"{path}: the store of this URL scheme ({type(self).__name__}) does not delete")

    def list(self, prefix: str) -> list[str]:
        raise OptionError(f"{prefix}: the store of this URL scheme ({type(self).__name__}) cannot list its objects")

    def download(self, path: str, target: str) -> None:
        """Copy the object ``path`` to the local file ``target``."""
        with open(target, "wb") as f:
            f.write(self.read(path))

    def open(self, path: str) -> Opened:
        return _InStore(self, path)

    def handle_cache(self) -> HandleCache:
        return KeptHandles()
