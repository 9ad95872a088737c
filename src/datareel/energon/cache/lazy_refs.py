"""The lazy references a :class:`~.file_cache_pool.FileStoreCachePool` hands out, and the entry they share:
:class:`FileCacheLazy` (a file-store entry being copied to the cache, read by ``get()``), :class:`CacheFileLazy`
(a value ``to_cache`` moved into the cache).  See :mod:`.file_cache_pool` for what ``get()`` does in each case."""

from __future__ import annotations

import pickle
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from ...errors import DatasetError
from ...sources.source_info import SourceInfo, add_source_info
from ...sources.typed import edataclass
from .base import Lazy

T = TypeVar("T")


@edataclass
class _PendingTask:
    """One entry: the background copy of ``ds``'s ``fname`` and the references waiting for it."""

    ds: Any
    fname: str
    send_to_cache_future: Future[bool] | None = None
    refcount: int = 1
    data_size: int = 0
    require_data_now: bool = False  # a reader waits: a copy waiting for space gives up
    cache_path: Path | None = None
    source_info: SourceInfo | None = None


@edataclass
class FileCacheLazy(Lazy[T]):
    """A reference to one entry of a :class:`FileStoreCachePool` (see the module docstring)."""

    entry: _PendingTask
    _data: tuple[T, SourceInfo] | None = None

    def get(self, sample: Any = None) -> T:
        if self._data is None:
            self._data = self.pool._get_data(self.ds, self.fname, self.entry)
        add_source_info(sample, self._data[1])
        return self._data[0]

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname

    def __del__(self) -> None:
        if self._data is None:  # never read: this reference no longer holds the entry
            try:
                self.pool._drop(self.entry)
            except Exception:  # interpreter shutdown, a pool of another process: nothing to free here
                pass


@edataclass
class CacheFileLazy(Lazy[T]):
    """A value moved to one cache file by :meth:`FileStoreCachePool.to_cache`; the first :meth:`get` loads
    it and removes the file (so does garbage collection of an unread one)."""

    cache_path: Path | None
    _data: T | None = None
    _loaded: bool = False

    def get(self, sample: Any = None) -> T:
        if not self._loaded:
            try:
                f = open(self.cache_path, "rb")  # type: ignore[arg-type]
            except FileNotFoundError:
                raise DatasetError(
                    f"to_cache value {self.fname!r}: its file {self.cache_path} is gone (the pool was closed, which "
                    f"removes its directory); read such values before FileStoreCachePool.close()"
                ) from None
            with f:
                self._data = pickle.load(f)  # own bytes: written by to_cache into this pool's private dir
            self._loaded = True
            self.cache_path.unlink(missing_ok=True)  # type: ignore[union-attr]
            self.cache_path = None
        return self._data  # type: ignore[return-value]

    def __del__(self) -> None:
        if self.cache_path is not None:
            try:
                self.cache_path.unlink(missing_ok=True)
            except Exception:
                pass
            self.cache_path = None

    def __hash__(self) -> int:
        return hash((self.fname, self.cache_path))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, CacheFileLazy) and (self.fname, self.cache_path) == (other.fname, other.cache_path)

    def __repr__(self) -> str:
        return f"CacheFileLazy(fname={self.fname!r}, cache_path={self.cache_path!r})"
