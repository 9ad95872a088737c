"""Energon's ``megatron.energon.cache.no_cache``: :class:`NoCachePool` (reads when asked, caches nothing)
and its :class:`DirectLazy`."""

from __future__ import annotations

from typing import Any, TypeVar

from ...sources.source_info import SourceInfo, add_source_info
from ...sources.typed import edataclass
from .base import CachePool, FileStore, Lazy, MockLazy

__all__ = ["DirectLazy", "NoCachePool"]

T = TypeVar("T")


@edataclass
class DirectLazy(Lazy[T]):
    """Reads ``ds[fname]`` at the first :meth:`get` (and keeps it for the next ones)."""

    _data: tuple[T, SourceInfo] | None = None

    def get(self, sample: Any = None) -> T:
        if self._data is None:
            self._data = self.ds[self.fname]
        add_source_info(sample, self._data[1])
        return self._data[0]

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname


class NoCachePool(CachePool):
    """The pool a loader uses when given none: every read goes to the store when the data is asked for."""

    def get(self, ds: FileStore[Any], fname: str, sample: Any = None) -> Any:
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore[Any], fname: str) -> DirectLazy[Any]:
        return DirectLazy(ds=ds, fname=fname, pool=self)

    def to_cache(self, data: T, name: str) -> Lazy[T]:
        return MockLazy(fname=name, get_fn=lambda _: data)

    def close(self) -> None:
        return None
