"""Energon's ``prepare_filesystem_dataset``: the media metadata of a directory of files (local or a bucket
prefix), stored in its ``.nv-meta/index.sqlite`` for :meth:`SystemFileStore.get_media_metadata
<datareel.energon.cache.SystemFileStore.get_media_metadata>` (the ``filesystem://`` auxiliary datasets).

The database is built in a local temporary file and moved (or uploaded) into place when complete; rows
are keyed by the file's path relative to the root, as Energon keys them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from typing import Any

from ...errors import DatasetError
from ...storage import files_for, is_remote, join
from .extractor import MediaFilterConfig
from .metadata import serialize_media_metadata

__all__ = ["prepare_filesystem_dataset"]

META = ".nv-meta"
INDEX = "index.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS media_metadata (entry_key TEXT PRIMARY KEY, metadata_type TEXT NOT NULL,"
    " metadata_json TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS media_filters (filter_id INTEGER PRIMARY KEY AUTOINCREMENT, strategy TEXT NOT NULL,"
    " patterns TEXT, created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP, UNIQUE(strategy, patterns));"
)


def _files(root: str) -> list[str]:
    """Paths of the files under ``root``, relative to it, sorted; ``.nv-meta`` left out."""
    if is_remote(root):
        prefix = root.rstrip("/") + "/"
        names = [url[len(prefix) :] for url in files_for(root).list(root) if url.startswith(prefix)]
    else:
        names = [
            os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            for folder, _dirs, files in os.walk(root)
            for name in files
        ]
    return sorted(n for n in names if not (n == META or n.startswith(META + "/") or f"/{META}/" in f"/{n}"))


def prepare_filesystem_dataset(
    root_path: Any,
    media_filter: MediaFilterConfig,
    *,
    progress: bool = False,
    workers: int = 16,
    index_sqlite_tmp_path: Any = None,
) -> int:
    """Measure every media file under ``root_path`` (by ``media_filter``) and store the records; returns how
    many were written.  ``progress`` and ``workers`` are accepted for Energon's signature: files are read in
    this process, one after another."""
    root = str(root_path)
    if not is_remote(root) and not os.path.isdir(root):
        raise DatasetError(f"prepare_filesystem_dataset: {root} is not a directory")
    names = [n for n in _files(root) if media_filter.should_consider_all() or media_filter.should_consider_media(n)]
    if not names:
        raise DatasetError(f"prepare_filesystem_dataset: no media files found under {root} (filter {media_filter})")
    target = join(root, f"{META}/{INDEX}")
    tmp_dir = tempfile.mkdtemp(prefix="datareel-media-")
    build = str(index_sqlite_tmp_path) if index_sqlite_tmp_path is not None else os.path.join(tmp_dir, INDEX)
    try:
        store = files_for(target)
        if store.exists(target):  # keep what is there (the sample tables of a prepared dataset)
            store.download(target, build)
        written = 0
        db = sqlite3.connect(build)
        try:
            db.executescript(_SCHEMA)
            db.execute(
                "INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)",
                (media_filter.strategy.value, ",".join(media_filter.patterns)),
            )
            for name in names:
                url = join(root, name)
                found = media_filter.extract_metadata(files_for(url).read(url), filename=name)
                if found is None:
                    continue
                kind, text = serialize_media_metadata(found)
                db.execute("INSERT OR REPLACE INTO media_metadata VALUES (?, ?, ?)", (name, kind.value, text))
                written += 1
            db.commit()
        finally:
            db.close()
        if is_remote(target):
            with open(build, "rb") as f:
                store.write(target, f.read())
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(build, target)
        return written
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
