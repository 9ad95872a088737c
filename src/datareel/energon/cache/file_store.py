"""Energon's ``megatron.energon.cache.file_store``: the file stores cookers read auxiliary data from.

- :class:`DecodeFileStore`: another store, its items decoded (a :class:`~.base.FileStoreDecoder`);
- :class:`SystemFileStore`: files under a directory (or a bucket prefix), by relative path
  (``filesystem://`` in a metadataset's ``aux``);
- :class:`WebdatasetFileStore`: a prepared WebDataset, by ``"<sample key>.<part>"`` (one ranged read of the
  part, found in the dataset's ``.nv-meta/index.sqlite``);
- :class:`JsonlFileStore`: a prepared ``.jsonl``, by sample key (the line number).

Every store is picklable and opens what it reads lazily in the process that reads (DataLoader
workers included); bytes come through :func:`datareel.storage.files_for`, so local paths and
``msc://`` / ``s3://`` URLs read alike.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from typing import Any

from ...errors import DatasetError
from ...sources.source_info import SourceInfo
from ...storage import files_for, is_remote, join
from .base import FileStore, FileStoreDecoder, FileStoreWrapper

__all__ = ["DecodeFileStore", "JsonlFileStore", "SystemFileStore", "WebdatasetFileStore", "epath"]

ENTRY_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
"""``"<key>.<part>"`` -> key, part: the key ends at the first dot of the last path component (Energon's rule)."""
INDEX_SQLITE = "index.sqlite"


def epath(path: Any) -> Any:
    """``path`` as Energon's ``EPath`` where the facade has it (what Energon's records hold), else as given."""
    try:
        from ..epathlib import EPath
    except ImportError:
        return path
    return EPath(path)


class DecodeFileStore(FileStoreWrapper[Any]):
    """``inner``'s items decoded by ``decoder`` (``decoder.decode(fname, raw)``)."""

    def __init__(self, inner: FileStore[bytes], *, decoder: FileStoreDecoder):
        super().__init__(inner)
        self.decoder = decoder

    def __getitem__(self, fname: str) -> tuple[Any, SourceInfo]:
        data, info = self._inner[fname]
        return self.decoder.decode(fname, data), info

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self.decoder.decode(kwargs["fname"], self._inner._decode_raw(data, **kwargs))

    def __str__(self) -> str:
        return f"DecodeFileStore(inner={self._inner}, decoder={self.decoder})"


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
    """A read-only connection to the sqlite file at ``url`` (a remote one is downloaded first, once)."""
    db = state.get("sqlite")
    if db is None:
        path = url
        if is_remote(url):
            tmp = tempfile.mkdtemp(prefix="datareel-index-")
            path = os.path.join(tmp, INDEX_SQLITE)
            files_for(url).download(url, path)
        db = state["sqlite"] = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
    return db


def _media_row(db: sqlite3.Connection, key: str, where: str) -> Any:
    from ..media.metadata import deserialize_media_metadata

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
        self.base_dir = epath(base_dir) if base_dir is not None else None

    def _url(self, key: str) -> str:
        return key if self.base_dir is None else join(str(self.base_dir), key)

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
        self.base_path = epath(dataset_path)
        self._url = str(dataset_path)

    def get_path(self) -> str:
        return str(self.base_path)

    def _db(self) -> sqlite3.Connection:
        state = self._state()
        if "shards" not in state:
            from ...formats.webdataset import meta
            from ...storage.path import as_path

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
            " WHERE s.sample_key = ? AND p.part_name = ?",
            (sample_key, part),
        ).fetchone()
        if row is None:
            raise KeyError(f"{self._url} has no file {key!r} (no sample {sample_key!r} with a part {part!r})")
        tar_id, offset, size = row
        shard = self._state()["shards"][tar_id]
        url = join(self._url, shard)
        data = files_for(url).read_range(url, offset, offset + size)
        return data, SourceInfo(dataset_path=self.base_path, index=key, shard_name=shard, file_names=(key,))

    def get_media_metadata(self, key: str) -> Any:
        return _media_row(self._db(), key, self._url)

    def __str__(self) -> str:
        return f"WebdatasetFileStore(dataset_path={self.base_path})"


class JsonlFileStore(FileStore[bytes]):
    """A prepared ``.jsonl`` file's lines (raw bytes) by sample key (the line's index, as a string)."""

    def __init__(self, jsonl_path: Any):
        from ...formats.jsonl.reader import JsonlSource

        self.jsonl_path = epath(jsonl_path)
        self._source = JsonlSource(str(jsonl_path))

    def get_path(self) -> str:
        return str(self.jsonl_path)

    def __getitem__(self, key: str) -> tuple[bytes, SourceInfo]:
        from ...sources.index_files import sample_range

        try:
            index = int(key)
        except ValueError:
            raise KeyError(f"{key!r} is not a sample key of {self.jsonl_path} (keys are line numbers)") from None
        url = str(self._source.path)
        start, stop = sample_range(self._source._index(), index, lambda: f"{url}.idx")
        data = files_for(url).read_range(url, start, stop)
        return data, SourceInfo(dataset_path=self.jsonl_path, index=index, shard_name=url, file_names=(key,))
