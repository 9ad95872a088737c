"""Streaming what ``datareel prepare`` finds into Energon's ``index.sqlite``, one shard at a time.

:class:`IndexDb` takes each shard's scan as it arrives (in shard order) and keeps only
what is O(shards) or smaller in memory: per-shard counts and the set of part names. Keys
go straight into the ``samples`` table, whose ``UNIQUE`` key index is the dataset-wide
duplicate check (no dict of every key in one process). The database lives in the staged
metadata directory, so it becomes visible only with the rest of the metadata.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from ...errors import DatasetError

SCHEMA = (
    "CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE,"
    " sample_index INTEGER NOT NULL, byte_offset INTEGER, byte_size INTEGER);"
    "CREATE TABLE sample_parts (tar_file_id INTEGER NOT NULL, sample_index INTEGER NOT NULL,"
    " part_name TEXT NOT NULL, content_byte_offset INTEGER, content_byte_size INTEGER);"
)
INDICES = (
    "CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);"
    "CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);"
    "CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name,"
    " content_byte_offset, content_byte_size);"
)
MEDIA_SCHEMA = (
    "CREATE TABLE media_metadata (entry_key TEXT PRIMARY KEY, metadata_type TEXT NOT NULL,"
    " metadata_json TEXT NOT NULL);"
    "CREATE TABLE media_filters (filter_id INTEGER PRIMARY KEY AUTOINCREMENT, strategy TEXT NOT NULL,"
    " patterns TEXT, created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP, UNIQUE(strategy, patterns));"
)
"""Energon's media tables (``prepare`` with a media filter): each media file's metadata by ``key.part``, and
the filter that chose them."""
CACHE_KIB = 16 * 1024
"""sqlite's page cache while building (bounded whatever the dataset size)."""


class IndexDb:
    """Energon's lookup index (samples by key, parts by sample), written shard by shard.

    ``where`` names the dataset in errors (a directory or a URL). Use as a context
    manager; :meth:`finish` builds the secondary indices and commits.
    """

    def __init__(self, path: Path, where: str, *, media: bool = False) -> None:
        self.where = where
        self.media = media
        self.counts: dict[str, int] = {}  # shard -> samples, in shard order
        self.parts: set[str] = set()
        self._shards: list[str] = []
        self._path = path
        self._db = sqlite3.connect(path)
        # a staged file renamed into place when complete: no journal or syncs needed while building
        self._db.executescript(f"PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-{CACHE_KIB};")
        self._db.executescript(SCHEMA + (MEDIA_SCHEMA if media else ""))

    def __enter__(self) -> IndexDb:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._db.close()

    def add(self, shard: str, offsets: list[int], keys: list[str], parts: list[tuple[int, str, int, int]]) -> None:
        """One shard's samples (``offsets``: count + 1 entries) and parts (sample index, part, offset, size).

        Raises :class:`DatasetError` naming both samples when a key was already added.
        """
        tar_id = len(self._shards)
        self._shards.append(shard)
        self.counts[shard] = len(keys)
        try:
            self._db.executemany(
                "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                ((tar_id, key, i, offsets[i], offsets[i + 1] - offsets[i]) for i, key in enumerate(keys)),
            )
        except sqlite3.IntegrityError:
            self._duplicate(tar_id, keys)
            raise  # not reached: _duplicate raises (a constraint other than the key's would surface here)
        self._db.executemany("INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)", ((tar_id, *part) for part in parts))
        self.parts.update(part for _, part, _, _ in parts)

    def add_media(self, rows: list[tuple[str, str, str]]) -> None:
        """Media metadata rows ``(entry key "key.part", metadata type, metadata JSON)`` (a database made with
        ``media=True``); a second row for one entry replaces the first, as Energon's writer does."""
        self._db.executemany("INSERT OR REPLACE INTO media_metadata VALUES (?, ?, ?)", rows)

    def add_media_filter(self, strategy: str, patterns: str) -> None:
        """Record the media filter that chose the media files (Energon's ``media_filters`` row)."""
        self._db.execute("INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)", (strategy, patterns))

    def _duplicate(self, tar_id: int, keys: list[str]) -> None:
        """Name the first key of shard ``tar_id`` that an earlier sample holds (the key index refused it)."""
        for i, key in enumerate(keys):
            row = self._db.execute("SELECT tar_file_id, sample_index FROM samples WHERE sample_key = ?", (key,))
            other = row.fetchone()
            if other is not None and tuple(other) != (tar_id, i):
                raise DatasetError(
                    f"duplicate sample key {key!r}: sample {other[1]} of shard {self.where}/{self._shards[other[0]]} "
                    f"and sample {i} of shard {self.where}/{self._shards[tar_id]}; keys must be unique across the "
                    f"dataset: rename one"
                )

    def finish(self) -> None:
        """Build the lookup indices, commit, and flush the file to disk (it was built without syncs)."""
        self._db.executescript(INDICES)
        self._db.commit()
        fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
