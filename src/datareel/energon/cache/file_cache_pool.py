"""Energon's ``megatron.energon.cache.file_cache_pool``: :class:`FileStoreCachePool`, which copies
file-store data to a local cache directory in background threads, and its :class:`FileCacheLazy`.

Each ``(store path, file name)`` asked for with :meth:`FileStoreCachePool.get_lazy` is one entry: one
background copy, shared by every lazy reference to it (``entry.refcount``).  The copy waits while the
cache holds ``max_cache_count`` files or would pass ``max_cache_size`` bytes.  ``lazy.get()``:

- a copy not started yet is cancelled and the data read directly;
- a copy waiting for space stops waiting, and the data is read directly;
- a copy running is waited for; a copy done is read back from the cache;
- a copy that did not cache is queued again (at the end) while other references still want it.

The last reference read (or garbage-collected) removes the entry and its file.  ``method="raw"`` caches
the store's raw bytes and decodes them when read back; ``"pickle"`` caches the decoded value pickled.

Each process has its own cache directory (``parent_cache_dir/cache_<random>``) and threads: a pool that
reaches a DataLoader worker (forked or unpickled) starts afresh there, with nothing pending.  The
directory is removed by :meth:`FileStoreCachePool.close` (a lazy read after it reads from its store; a
value moved by ``to_cache`` and not read yet is gone, and its ``get`` says so), else when the pool is
garbage-collected or the process exits (Energon leaves it behind).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
import threading
import uuid
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from ...errors import OptionError
from ...sources.source_info import SourceInfo
from .base import CachePool, FileStore
from .lazy_refs import CacheFileLazy, FileCacheLazy, _PendingTask

__all__ = ["CacheFileLazy", "FileCacheLazy", "FileStoreCachePool"]

T = TypeVar("T")


class FileStoreCachePool(CachePool):
    """Prefetches file-store data to a local cache directory in ``num_workers`` threads (see the module
    docstring); ``max_cache_size_gbytes`` / ``max_cache_count`` bound what the directory holds."""

    def __init__(
        self,
        *,
        parent_cache_dir: Path | str | None = None,
        num_workers: int = 8,
        max_cache_size_gbytes: float = 1024,
        max_cache_count: int = 10_000_000,
        method: Literal["raw", "pickle"] = "raw",
    ):
        if method not in ("raw", "pickle"):
            raise OptionError(
                f"FileStoreCachePool(method={method!r}): give 'raw' (cache the stored bytes, decode when read) "
                f"or 'pickle' (cache the decoded value)"
            )
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise OptionError(f"FileStoreCachePool(num_workers={num_workers!r}): give a number of threads >= 1")
        self.parent_cache_dir = Path(parent_cache_dir) if parent_cache_dir is not None else Path(tempfile.gettempdir())
        self.num_workers = num_workers
        self.method = method
        self.max_cache_size = int(max_cache_size_gbytes * (1024**3))
        self.max_cache_count = int(max_cache_count)
        self._start()

    def _start(self) -> None:
        """This process's threads, lock, counters and cache directory (nothing pending)."""
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._space = threading.Condition(self._lock)  # signalled when space is freed or a reader waits
        self._pending: dict[tuple[str, str], _PendingTask] = {}
        self._closing = False
        self.current_cache_size = 0
        self.current_cache_count = 0
        self._workers = ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix="CacheWorker")
        self.cache_dir = (self.parent_cache_dir / f"cache_{uuid.uuid4().hex[:16]}").resolve()
        self.parent_cache_dir.mkdir(parents=True, exist_ok=True)
        # private to this process (0o700, new): the pickles read back below are only ever this pool's own bytes
        self.cache_dir.mkdir(mode=0o700, exist_ok=False)
        self._remove_dir = weakref.finalize(self, _remove_dir, self.cache_dir, self._pid)

    def _here(self) -> None:
        if self._pid != os.getpid():  # a forked worker: the parent's threads do not exist here
            self._start()

    # -- reading ---------------------------------------------------------------------------------------
    def get(self, ds: FileStore[Any], fname: str, sample: Any = None) -> Any:
        """A direct read (the cache is not used)."""
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore[Any], fname: str) -> FileCacheLazy[Any]:
        """A reference to ``ds``'s ``fname``, copied to the cache in the background; references to the
        same file share one entry (and one copy)."""
        self._here()
        key = (ds.get_path(), fname)
        with self._lock:
            if self._closing:
                raise RuntimeError("FileStoreCachePool.get_lazy: the pool is closed; make a new one")
            entry = self._pending.get(key)
            if entry is not None:
                entry.refcount += 1
            else:
                entry = self._pending[key] = _PendingTask(ds=ds, fname=fname)
                entry.send_to_cache_future = self._workers.submit(self._cache_out, ds, fname, entry)
        return FileCacheLazy(ds=ds, fname=fname, pool=self, entry=entry)

    def _get_data(self, ds: FileStore[Any], fname: str, entry: _PendingTask) -> tuple[Any, SourceInfo]:
        """One reference's read of ``entry`` (the cases are in the module docstring)."""
        with self._lock:
            future = entry.send_to_cache_future
            if future is not None and future.cancel():  # not started: read directly
                try:
                    return ds[fname]
                finally:
                    self._drop(entry)
                    self._requeue(entry, future)
            entry.require_data_now = True
            self._space.notify_all()
        cached: bool | None = None
        try:
            cached = bool(future.result()) if future is not None else False
            if cached:
                try:
                    return self._read_cached(entry)
                except FileNotFoundError:  # the pool was closed (its directory removed): read from the store
                    pass
            return ds[fname]
        finally:
            with self._lock:
                entry.require_data_now = False
                self._drop(entry)
                if cached is False:
                    self._requeue(entry, future)

    def _requeue(self, entry: _PendingTask, done: Future[bool] | None) -> None:
        """Copy ``entry`` again (at the queue's end) if other references want it and no one did already."""
        if entry.refcount > 0 and entry.send_to_cache_future is done and not self._closing:
            entry.send_to_cache_future = self._workers.submit(self._cache_out, entry.ds, entry.fname, entry)

    def _read_cached(self, entry: _PendingTask) -> tuple[Any, SourceInfo]:
        with open(entry.cache_path, "rb") as f:  # type: ignore[arg-type]
            data = f.read()
        if self.method == "raw":
            return entry.ds._decode_raw(data, fname=entry.fname), entry.source_info  # type: ignore[return-value]
        # own bytes: method="pickle" wrote them into this pool's private dir (never a dataset's file)
        return pickle.loads(data), entry.source_info  # type: ignore[return-value]  # own bytes

    # -- the background copy ------------------------------------------------------------------------------
    def _cache_out(self, ds: FileStore[Any], fname: str, entry: _PendingTask) -> bool:
        """Read ``fname``, wait for space, write it to the cache; ``False`` if it was not cached."""
        with self._lock:
            if self._closing:
                return False
        if self.method == "raw":
            data, info = ds._get_raw(fname)
        else:
            value, info = ds[fname]
            data = pickle.dumps(value)
        with self._lock:
            entry.source_info = info
            entry.data_size = size = len(data)
            while (
                self.current_cache_count + 1 > self.max_cache_count
                or self.current_cache_size + size > self.max_cache_size
            ):
                self._space.wait()
                if entry.require_data_now or self._closing:
                    return False  # a reader needs it now: it reads directly
            if self._closing or entry.refcount <= 0:
                return False
            self.current_cache_size += size
            self.current_cache_count += 1
        path = self._path_for(ds, fname)
        try:
            self._write(path, data)
        except BaseException:
            with self._lock:
                self._unreserve(size)
            raise
        with self._lock:
            if entry.refcount <= 0:  # every reference went while it was written
                path.unlink(missing_ok=True)
                self._unreserve(size)
                return False
            entry.cache_path = path
        return True

    def _path_for(self, ds: FileStore[Any], fname: str) -> Path:
        def digest(text: str) -> str:
            return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()

        return self.cache_dir / f"{digest(str(ds.get_path()))}_{digest(fname)}"

    def _write(self, path: Path, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    # -- bookkeeping (callers hold the lock) ------------------------------------------------------------
    def _drop(self, entry: _PendingTask) -> None:
        """One reference to ``entry`` fewer; the last one removes the entry and its cached file."""
        with self._lock:
            key = (entry.ds.get_path(), entry.fname)
            if self._pending.get(key) is not entry:
                return  # already removed (or a pool of another process)
            entry.refcount -= 1
            if entry.refcount <= 0:
                del self._pending[key]
                if entry.cache_path is not None:
                    entry.cache_path.unlink(missing_ok=True)
                    entry.cache_path = None
                    self._unreserve(entry.data_size)

    def _unreserve(self, size: int) -> None:
        self.current_cache_size -= size
        self.current_cache_count -= 1
        self._space.notify_all()

    # -- values moved out of memory ---------------------------------------------------------------------
    def to_cache(self, data: T, name: str) -> CacheFileLazy[T]:
        """``data`` pickled to a file of its own; the lazy returned loads it (once) and removes the file."""
        self._here()
        if self._closing:
            raise RuntimeError("FileStoreCachePool.to_cache: the pool is closed; make a new one")
        path = self.cache_dir / str(uuid.uuid4())
        self._write(path, pickle.dumps(data))
        return CacheFileLazy(ds=None, fname=name, pool=self, cache_path=path)

    def close(self) -> None:
        """Cancel the copies not started, stop waiting ones, wait for the running ones; then remove the
        cache directory (see the module docstring)."""
        if self._pid != os.getpid():
            return
        with self._lock:
            self._closing = True
            for entry in self._pending.values():
                if entry.send_to_cache_future is not None:
                    entry.send_to_cache_future.cancel()
            self._space.notify_all()
        self._workers.shutdown(wait=True)
        with self._lock:
            self._pending.clear()
            self.current_cache_size = self.current_cache_count = 0
        self._remove_dir()

    # -- crossing to workers ------------------------------------------------------------------------------
    _CONFIG = ("parent_cache_dir", "num_workers", "method", "max_cache_size", "max_cache_count")

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    def __str__(self) -> str:
        return (
            f"FileStoreCachePool(cache_dir={self.cache_dir}, max_cache_size={self.max_cache_size}, "
            f"max_cache_count={self.max_cache_count}, method={self.method}, "
            f"current_cache_size={self.current_cache_size}, current_cache_count={self.current_cache_count})"
        )


def _remove_dir(path: Path, pid: int) -> None:
    """Remove a pool's cache directory, in the process that made it only (a forked worker's copy of the
    pool must not remove its parent's)."""
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)
