"""Energon's ``megatron.energon.cache``: random access by key for cookers (:class:`FileStore` and its kinds)
and cache pools that read it now or in the background (:class:`FileStoreCachePool`, :class:`NoCachePool`).

A metadataset leaf's ``aux:`` gives its cookers one store per name (:mod:`datareel.blend.aux`); a cooker
marked ``@cooker(need_primary=True)`` also gets the store of its own dataset, and ``need_cache=True`` the
loader's pool (``get_savable_loader(..., cache_pool=...)``).  Which samples are read stays the reel's
choice: a store is only ever asked for keys, in the worker that cooks the sample.
"""

from .base import CachePool, FileStore, FileStoreDecoder, Lazy, MockLazy, PrimaryFileStore
from .file_cache_pool import FileCacheLazy, FileStoreCachePool
from .file_store import DecodeFileStore, SystemFileStore
from .no_cache import DirectLazy, NoCachePool

__all__ = [
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
]
