"""Energon's ``megatron.energon.cache.base``: random access by key (:class:`FileStore`, datareel's own:
:mod:`datareel.blend.stores`), lazy references (:class:`Lazy`, :class:`MockLazy`), the cache-pool interface
(:class:`CachePool`), the file-store decoder interface (:class:`FileStoreDecoder`) and the primary store of a
cooker (:class:`PrimaryFileStore`).

A :class:`FileStore` maps a file name (``"<sample key>.<part>"`` in a prepared dataset, a relative path
on a file system) to ``(data, SourceInfo)``; :meth:`FileStore.get` returns the data and appends the
:class:`~datareel.energon.source_info.SourceInfo` to the ``__sources__`` of the sample it is given.
Cookers receive file stores for the auxiliary datasets of a metadataset leaf (:mod:`datareel.blend.aux`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ...blend.stores import FileStore, FileStoreWrapper
from ...sources.source_info import SourceInfo
from ...sources.typed import edataclass

__all__ = ["CachePool", "FileStore", "FileStoreDecoder", "FileStoreWrapper", "Lazy", "MockLazy", "PrimaryFileStore"]

T = TypeVar("T")


@edataclass
class Lazy(Generic[T]):
    """A reference to data read later: ``lazy.get(sample)`` reads it (and records its source in ``sample``)."""

    ds: Any
    fname: str
    pool: Any

    @abc.abstractmethod
    def get(self, sample: Any = None) -> T: ...

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname


@edataclass
class MockLazy(Lazy[T]):
    """A :class:`Lazy` whose data comes from ``get_fn(fname)`` (no store, no source recorded)."""

    get_fn: Callable[[str], T]

    def __init__(self, fname: str, get_fn: Callable[[str], T]):
        self.ds = None
        self.fname = fname
        self.pool = None
        self.get_fn = get_fn

    def get(self, sample: Any = None) -> T:
        return self.get_fn(self.fname)

    def __hash__(self) -> int:
        return hash((self.fname, self.get_fn))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, MockLazy) and self.fname == other.fname and self.get_fn == other.get_fn

    def __repr__(self) -> str:
        return f"MockLazy(fname={self.fname!r}, get_fn={self.get_fn!r})"


class CachePool(abc.ABC):
    """Reads file-store data now (:meth:`get`) or in the background for later (:meth:`get_lazy`)."""

    @abc.abstractmethod
    def get(self, ds: FileStore[Any], fname: str, sample: Any = None) -> Any:
        """``ds``'s data for ``fname`` now; its source is appended to ``sample``'s ``__sources__``."""

    @abc.abstractmethod
    def get_lazy(self, ds: FileStore[Any], fname: str) -> Lazy[Any]:
        """A :class:`Lazy` for ``ds``'s data for ``fname``."""

    @abc.abstractmethod
    def to_cache(self, data: T, name: str) -> Lazy[T]:
        """``data`` moved out of memory; the :class:`Lazy` returned gives it back (``name``: for debugging)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop background work and free what the pool holds."""


class FileStoreDecoder(abc.ABC):
    """Decodes one file of a store: ``decode("<key>.<ext>", raw bytes) -> value`` (by its extension)."""

    @abc.abstractmethod
    def decode(self, fname: str, data: bytes) -> Any: ...


class PrimaryFileStore(FileStoreWrapper[T]):
    """The store of the sample's own dataset: a key that starts with ``.`` is the current sample's key
    followed by it (``primary.get(".txt")`` is this sample's ``txt`` part)."""

    def __init__(self, inner: FileStore[T], current_key: str):
        super().__init__(inner)
        self._current_key = current_key

    def _full(self, key: str) -> str:
        return f"{self._current_key}{key}" if key.startswith(".") else key

    def __getitem__(self, key: str) -> tuple[T, SourceInfo]:
        return self._inner[self._full(key)]

    def get(self, key: str, sample: Any = None) -> Any:
        return self._inner.get(self._full(key), sample)

    def get_media_metadata(self, key: str) -> Any:
        return self._inner.get_media_metadata(self._full(key))
