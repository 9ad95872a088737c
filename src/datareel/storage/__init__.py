"""Where dataset bytes live: one registered store per URL scheme (a local path, ``s3://``, ``msc://``, ...).

Storage owns bytes; formats (:mod:`datareel.formats`) own their meaning.  Each URL scheme has one
reader, a :class:`Files`: an object's size and ETag (``info``), a byte range (``read_range``), a
micro-batch's ranges together (``read_ranges``), the whole of a small object, a listing, a write, and
where readers keep the handles of what they opened (``handle_cache``: the local store's is the process's
bounded set of open files).  Formats ask
:func:`files_for` for the store of a URL and never branch on where it lives; :func:`join` resolves a
relative path against a local directory or a URL alike.

    files = files_for("s3://bucket/ds/shard-0.tar")
    header = files.read_range("s3://bucket/ds/shard-0.tar", 0, 512)   # one ranged GET

A new scheme is one class and one line::

    class MemFiles(datareel.storage.StoreFiles):          # info() and read_range() are all it needs
        def __init__(self, blobs): self.blobs = blobs
        def info(self, path): ...                          # ObjectInfo(size) or raise NotFound
        def read_range(self, path, start, stop): ...

    datareel.storage.register_scheme("mem", lambda: MemFiles(blobs))
    datareel.open_dataset("mem://ds")                      # a prepared WebDataset, a .jsonl, a metadataset

Remote backends keep one client per process, made lazily (after a DataLoader worker forks) and
reused; transient failures are retried with exponential backoff, a bounded number of times and
within a deadline (:class:`~datareel.storage.retry.Retry`), then raised naming the URL.  Every
failure of a store is a :class:`~datareel.errors.StorageError` (a failure of the environment, never
of a sample: it is not substituted), :class:`NotFound` and :class:`AccessDenied` among them.

- :mod:`.registry` — scheme -> store: :func:`register_scheme`, :func:`files_for`, :func:`join`;
- :mod:`.base` — the :class:`Files` protocol and :class:`StoreFiles`, a store built from two operations;
- :mod:`.local` — the local file system (and ``file://``); :mod:`.handles` — its bounded open files;
- :mod:`.remote` — ``s3://`` and ``msc://`` through multi-storage-client (:mod:`.msc`, :mod:`.retry`);
- :mod:`.path` — :class:`~datareel.storage.path.RemotePath`, a URL with the ``pathlib`` face metadata
  readers use; :mod:`.atomic` — writing into a local directory: one writer, a swap with no gap.
"""

from __future__ import annotations

from ..errors import AccessDenied as AccessDenied
from ..errors import NotFound as NotFound
from ..errors import StorageError as StorageError
from .base import Files, HandleCache, KeptHandles, StoreFiles
from .objects import ObjectInfo, Opened
from .registry import SCHEMES, files_for, is_remote, join, register_scheme, scheme_of, unregister_scheme

REMOTE_SCHEMES = ("s3", "msc")
"""The stores datareel registers itself (besides ``file``); :data:`~datareel.storage.registry.SCHEMES` has all."""

__all__ = [
    "REMOTE_SCHEMES",
    "SCHEMES",
    "AccessDenied",
    "Files",
    "HandleCache",
    "KeptHandles",
    "NotFound",
    "ObjectInfo",
    "Opened",
    "StorageError",
    "StoreFiles",
    "files_for",
    "is_remote",
    "join",
    "register_scheme",
    "scheme_of",
    "unregister_scheme",
]
