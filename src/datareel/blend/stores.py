"""Data by key for cookers: the stores a metadataset leaf's ``aux:`` opens (:mod:`.aux`), Energon's file stores.

- :class:`FileStore`: ``store[key] -> (data, SourceInfo)``; ``store.get(key, sample)`` appends the record to
  the sample's ``__sources__``; :class:`FileStoreWrapper` a store over another one;
- :class:`SystemFileStore`: files under a directory (or a bucket prefix), by relative path
  (``filesystem://`` in a metadataset's ``aux``);
- :class:`WebdatasetFileStore`: a prepared WebDataset, by ``"<sample key>.<part>"`` (one ranged read of the
  part, found in the dataset's ``.nv-meta/index.sqlite``);
- :class:`JsonlFileStore`: a prepared ``.jsonl``, by sample key (the line number).

Every store is picklable and opens what it reads lazily in the process that reads (DataLoader workers
included); bytes come through :func:`datareel.storage.files_for`, so local paths and ``msc://`` / ``s3://``
URLs read alike.  A record's ``dataset_path`` is the store's path, as a string or as the type the facade
registers (``datareel.energon``'s ``EPath``: :func:`~datareel.sources.source_info.register_record_path`).
``datareel.energon.cache`` gives these classes under Energon's module paths, with its decoding store and
cache pools.
"""

from __future__ import annotations

import abc
import os
import re
import shutil
import sqlite3
import tempfile
import weakref
from typing import Any, Generic, TypeVar

from ..errors import DatasetError
from ..sources.source_info import SourceInfo, add_source_info
from ..sources.source_info import dataset_path as record_path
from ..storage import files_for, is_remote, join

__all__ = ["FileStore", "FileStoreWrapper", "JsonlFileStore", "SystemFileStore", "WebdatasetFileStore"]

T = TypeVar("T")
ENTRY_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
"""``"<key>.<part>"`` -> key, part: the key ends at the first dot of the last path component (Energon's rule)."""
JSONL_KEY = re.compile(r"(0|[1-9][0-9]*)(?:[.]json)?", re.ASCII)
"""A JSONL sample key: the line number as ``str(n)`` writes it, with Energon's ``.json`` or without."""
INDEX_SQLITE = "index.sqlite"


class FileStore(Generic[T]):
    """A dataset read by key: ``store[key] -> (data, SourceInfo)``."""

    @abc.abstractmethod
    def __getitem__(self, key: str) -> tuple[T, SourceInfo]: ...

    @abc.abstractmethod
    def get_path(self) -> str:
        """The dataset's path (what identifies it in a cache)."""

    def _get_raw(self, key: str) -> tuple[Any, SourceInfo]:
        """``(raw bytes, SourceInfo)`` for ``key``, not decoded (a plain store's items are raw)."""
        return self[key]

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        """``data`` from :meth:`_get_raw` decoded as ``__getitem__`` would (a plain store: unchanged)."""
        return data

    def get(self, key: str, sample: Any = None) -> Any:
        """The data for ``key``; its SourceInfo is appended to ``sample``'s ``__sources__``."""
        data, info = self[key]
        add_source_info(sample, info)
        return data

    def get_media_metadata(self, key: str) -> Any:
        """The media metadata (``ImageMetadata`` / ``AVMetadata``) prepared for ``key``."""
        raise NotImplementedError(f"{type(self).__name__} does not support media metadata retrieval")


class FileStoreWrapper(FileStore[T]):
    """A store over another one (decoding on access, say): raw reads go to the inner store."""

    def __init__(self, inner: FileStore[Any]):
        self._inner = inner

    def _get_raw(self, key: str) -> tuple[Any, SourceInfo]:
        return self._inner._get_raw(key)

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self._inner._decode_raw(data, **kwargs)

    def get_path(self) -> str:
        return self._inner.get_path()

    def get_media_metadata(self, key: str) -> Any:
        return self._inner.get_media_metadata(key)


class _Local:
    """Per-process state of a store (opened files, connections), dropped when pickled."""

    _opened: dict[str, Any] | None = None
    _pid: int | None = None

    def _state(self) -> dict[str, Any]:
        if self._pid != os.getpid() or self._opened is None:
            self._opened, self._pid = {}, os.getpid()
        return self._opened

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_opened", "_pid")}


def _sqlite(url: str, state: dict[str, Any]) -> sqlite3.Connection:
    """A read-only connection to the sqlite file at ``url`` (a remote one is downloaded first, once, to a
    temporary directory removed as soon as sqlite holds the file open, or else when the process exits)."""
    db = state.get("sqlite")
    if db is None:
        if not is_remote(url):
            db = sqlite3.connect(f"file:{url}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        else:
            tmp = tempfile.mkdtemp(prefix="datareel-index-")
            try:
                path = os.path.join(tmp, INDEX_SQLITE)
                files_for(url).download(url, path)
                db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file now
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # POSIX: an open file outlives its name
            if os.path.isdir(tmp):  # a system that keeps open files: remove it at exit
                weakref.finalize(db, shutil.rmtree, tmp, ignore_errors=True)
        state["sqlite"] = db
    return db


def _media_row(db: sqlite3.Connection, key: str, where: str) -> Any:
    from ..formats.webdataset.media import deserialize_media_metadata

    try:
        row = db.execute(
            "SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?", (key,)
        ).fetchone()
    except sqlite3.OperationalError:
        raise DatasetError(
            f"{where} has no media metadata; prepare it with a media filter (`energon prepare "
            f"--media-metadata-by-extension`, or prepare_dataset(media_filter=...))"
        ) from None
    if row is None:
        raise KeyError(f"no media metadata for {key!r} in {where}")
    return deserialize_media_metadata(*row)


class SystemFileStore(_Local, FileStore[bytes]):
    """Files by path relative to ``base_dir`` (a directory or a bucket prefix); ``None``: absolute paths."""

    def __init__(self, base_dir: Any = None):
        self.base_dir = record_path(base_dir) if base_dir is not None else None

    def _url(self, key: str) -> str:
        """Where ``key`` is read; a key that would leave ``base_dir`` is refused, naming it."""
        if self.base_dir is None:
            return key
        if not isinstance(key, str) or not key or "\0" in key:
            raise DatasetError(
                f"SystemFileStore({self.base_dir}): key {key!r} is empty or not a path; give a path relative to it"
            )
        if key.startswith("/") or "://" in key or ".." in key.split("/"):
            raise DatasetError(
                f"SystemFileStore({self.base_dir}): key {key!r} leaves the store's directory (an absolute path, a "
                f"URL or a '..' part); give a path relative to {self.base_dir} without '..', or read it from a "
                f"SystemFileStore() without base_dir, which takes absolute paths"
            )
        return join(str(self.base_dir), key)

    def __getitem__(self, key: str) -> tuple[bytes, SourceInfo]:
        url = self._url(key)
        data = files_for(url).read(url)
        return data, SourceInfo(dataset_path=self.base_dir, index=key, shard_name=str(self.base_dir), file_names=(key,))

    def get_path(self) -> str:
        return str(self.base_dir)

    def get_media_metadata(self, key: str) -> Any:
        """The metadata ``prepare_filesystem_dataset`` wrote for ``key`` (``.nv-meta/index.sqlite``)."""
        if self.base_dir is None:
            raise DatasetError("SystemFileStore.get_media_metadata needs a base_dir (the prepared directory)")
        url = join(str(self.base_dir), f".nv-meta/{INDEX_SQLITE}")
        if not files_for(url).exists(url):
            raise DatasetError(
                f"{self.base_dir} has no {url}: prepare its media metadata first (`energon prepare-media`, or "
                f"datareel.energon.media.filesystem_prepare.prepare_filesystem_dataset)"
            )
        return _media_row(_sqlite(url, self._state()), key, str(self.base_dir))

    def __str__(self) -> str:
        return f"SystemFileStore(base_dir={self.base_dir})"


class WebdatasetFileStore(_Local, FileStore[bytes]):
    """A prepared WebDataset's parts by ``"<sample key>.<part>"``, each read with one ranged read at the
    offsets ``.nv-meta/index.sqlite`` records (written by ``datareel prepare`` and ``energon prepare``)."""

    def __init__(self, dataset_path: Any):
        self.base_path = record_path(dataset_path)
        self._url = str(dataset_path)

    def get_path(self) -> str:
        return str(self.base_path)

    def _db(self) -> sqlite3.Connection:
        state = self._state()
        if "shards" not in state:
            from ..formats.webdataset import meta
            from ..storage.path import as_path

            url = join(self._url, f"{meta.META}/{INDEX_SQLITE}")
            if not files_for(url).exists(url):
                raise DatasetError(
                    f"{self._url} has no {meta.META}/{INDEX_SQLITE} (the lookup index of samples by key); prepare it "
                    f"again with `datareel prepare` or `energon prepare`"
                )
            state["shards"] = list(meta.read_info(as_path(self._url)))
            _sqlite(url, state)
        return state["sqlite"]

    def __getitem__(self, key: str) -> tuple[bytes, SourceInfo]:
        match = ENTRY_NAME.match(key)
        if match is None:
            raise KeyError(f"{key!r} is not a file name '<sample key>.<part>' of {self._url}")
        sample_key, part = match.groups()
        db = self._db()
        row = db.execute(
            "SELECT p.tar_file_id, p.content_byte_offset, p.content_byte_size FROM samples s JOIN sample_parts p"
            " ON p.tar_file_id = s.tar_file_id AND p.sample_index = s.sample_index"
            " WHERE s.sample_key = ? AND p.part_name = ? LIMIT 2",
            (sample_key, part),
        ).fetchall()
        if not row:
            raise KeyError(f"{self._url} has no file {key!r} (no sample {sample_key!r} with a part {part!r})")
        if len(row) > 1:
            shards = self._state()["shards"]
            raise DatasetError(
                f"{self._url}: file {key!r} is found more than once (sample key {sample_key!r} in shards "
                f"{sorted({shards[r[0]] for r in row})}); a lookup by key needs each key once: give the samples "
                f"unique keys and prepare the dataset again (energon prepare refuses repeated keys)"
            )
        tar_id, offset, size = row[0]
        shard = self._state()["shards"][tar_id]
        url = join(self._url, shard)
        data = files_for(url).read_range(url, offset, offset + size)
        return data, SourceInfo(dataset_path=self.base_path, index=key, shard_name=shard, file_names=(key,))

    def get_media_metadata(self, key: str) -> Any:
        return _media_row(self._db(), key, self._url)

    def __str__(self) -> str:
        return f"WebdatasetFileStore(dataset_path={self.base_path})"


class JsonlFileStore(FileStore[bytes]):
    """A prepared ``.jsonl`` file's lines (raw bytes) by sample key: Energon's ``"<n>.json"``, or ``"<n>"``,
    ``n`` the line's index as ``str(n)`` writes it (any other spelling is refused, naming the key)."""

    def __init__(self, jsonl_path: Any):
        from ..formats.jsonl.reader import JsonlSource

        self.jsonl_path = record_path(jsonl_path)
        self._source = JsonlSource(str(jsonl_path))

    def get_path(self) -> str:
        return str(self.jsonl_path)

    def __getitem__(self, key: str) -> tuple[bytes, SourceInfo]:
        from ..sources.index_files import sample_range

        match = JSONL_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            raise KeyError(
                f"{key!r} is not a sample key of {self.jsonl_path}: keys are line numbers as '<n>.json' (Energon's) "
                f"or '<n>', n written without sign, spaces, '_' or leading zeros (e.g. '2.json')"
            )
        index = int(match.group(1))
        url = str(self._source.path)
        idx = self._source._index()
        if index >= len(idx) - 1:
            raise KeyError(f"{key!r} is not a sample key of {self.jsonl_path}: it holds {len(idx) - 1} lines")
        start, stop = sample_range(idx, index, lambda: f"{url}.idx")
        data = files_for(url).read_range(url, start, stop)
        return data, SourceInfo(dataset_path=self.jsonl_path, index=index, shard_name=url, file_names=(key,))
