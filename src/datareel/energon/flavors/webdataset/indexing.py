"""Energon's ``megatron.energon.flavors.webdataset.indexing``: :class:`SqliteIndexWriter`, which writes a
dataset's ``.nv-meta/index.sqlite`` from the rows Energon's indexing workers send, and
:class:`DuplicateSampleKeyError`.

The tables and indices are datareel's own index writer's
(:mod:`datareel.formats.webdataset.index_db`, which ``datareel prepare`` and the facade's
``prepare_dataset`` use): one schema, so either writer's file reads the same.  This class adds Energon's
row-batch interface on top: rows name their shard (``tar_file_id``) themselves and may come in any
order, a batch of samples goes in whole or not at all, and an existing file is updated in place
(``reset_tables``).

Where datareel differs: misuse (a closed writer, media rows without media tables, sample tables without
``reset_tables``) raises :class:`~datareel.errors.OptionError` (Energon: ``assert``); ``close`` may be
called twice; the duplicate-key error names both samples that hold the key.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....errors import DuplicateSampleKeyError, OptionError
from ....formats.webdataset.index_db import INDICES, MEDIA_SCHEMA, SCHEMA

if TYPE_CHECKING:
    from .prepare import IndexMediaMetadata, IndexSample, IndexSamplePart

_BATCH = "datareel_append_samples"
"""The savepoint one :meth:`SqliteIndexWriter.append_samples` batch runs in."""
_SAMPLE_TABLES = ("samples", "sample_parts")  # dropping a table drops its indices too
_MEDIA_TABLES = ("media_metadata", "media_filters")
BUSY_TIMEOUT_MS = 5000
"""How long a write waits for another connection's lock on the file before failing."""


def _local_file(sqlite_path: Any) -> Path:
    """The local file ``sqlite_path`` names (an ``EPath``, a ``str`` or a path-like)."""
    if hasattr(sqlite_path, "local_path"):
        try:
            return Path(sqlite_path.local_path())
        except ValueError:
            pass
    elif isinstance(sqlite_path, (str, os.PathLike)) and "://" not in os.fspath(sqlite_path):
        return Path(os.fspath(sqlite_path))
    raise OptionError(
        f"sqlite_path={sqlite_path!r} is not a local file: sqlite writes only local files; build the index "
        f"in a local directory, then copy it to the store"
    )


class SqliteIndexWriter:
    """Writes ``index.sqlite`` at ``sqlite_path`` (local only).  With ``enable_sample_tables`` (the
    default) the ``samples`` and ``sample_parts`` tables are made afresh (``reset_tables`` must be true);
    with ``enable_media_metadata`` the ``media_metadata`` and ``media_filters`` tables are made, afresh
    when ``reset_tables``, else kept with their rows.  Use as a context manager, or call :meth:`close`,
    which builds the lookup indices and commits.  ``db`` is the open connection (``None`` once closed)."""

    def __init__(
        self,
        sqlite_path: Any,
        *,
        enable_sample_tables: bool = True,
        enable_media_metadata: bool = False,
        reset_tables: bool = True,
    ) -> None:
        if enable_sample_tables and not reset_tables:
            raise OptionError(
                "SqliteIndexWriter(enable_sample_tables=True, reset_tables=False): the sample tables are always "
                "written afresh; pass reset_tables=True, or enable_sample_tables=False to add media metadata only"
            )
        self.sqlite_path = sqlite_path
        self.enable_sample_tables = enable_sample_tables
        self.enable_media_metadata = enable_media_metadata
        self.reset_tables = reset_tables
        path = _local_file(sqlite_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db: sqlite3.Connection | None = sqlite3.connect(path)
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        dropped = (_SAMPLE_TABLES if enable_sample_tables else ()) + (
            _MEDIA_TABLES if enable_media_metadata and reset_tables else ()
        )
        script = "".join(f"DROP TABLE IF EXISTS {table};" for table in dropped)
        if enable_sample_tables:
            script += SCHEMA
        if enable_media_metadata:
            script += MEDIA_SCHEMA.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        self.db.executescript(script)

    def _open(self) -> sqlite3.Connection:
        if self.db is None:
            raise OptionError(f"the index writer of {self.sqlite_path} is closed; open a new SqliteIndexWriter")
        return self.db

    def append_samples(self, rows: Iterable[IndexSample]) -> None:
        """Add the sample rows ``rows``, all or none: a key that is already in the index (or twice in
        ``rows``) raises :class:`DuplicateSampleKeyError` naming it, and adds no row of the batch."""
        db = self._open()
        rows = rows if isinstance(rows, Sequence) else list(rows)
        if not rows:
            return
        db.execute(f"SAVEPOINT {_BATCH}")
        try:
            db.executemany(
                "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size) "
                "VALUES (?, ?, ?, ?, ?)",
                ((r.tar_file_id, r.sample_key, r.sample_index, r.byte_offset, r.byte_size) for r in rows),
            )
        except sqlite3.IntegrityError:
            db.execute(f"ROLLBACK TO SAVEPOINT {_BATCH}")  # the rows inserted before the refused one
            db.execute(f"RELEASE SAVEPOINT {_BATCH}")
            self._raise_duplicate(db, rows)
            raise  # no key repeats: another constraint (a NULL key or index) refused the batch
        db.execute(f"RELEASE SAVEPOINT {_BATCH}")

    @staticmethod
    def _raise_duplicate(db: sqlite3.Connection, rows: Sequence[IndexSample]) -> None:
        """Raise :class:`DuplicateSampleKeyError` for the first key of ``rows`` held by an earlier row of
        ``rows`` or of the index (sqlite says only that some row broke the key's uniqueness)."""
        earlier: dict[str, tuple[int, int]] = {}
        for row in rows:
            here = (row.tar_file_id, row.sample_index)
            if row.sample_key in earlier:
                raise DuplicateSampleKeyError(row.sample_key, earlier[row.sample_key], here) from None
            found = db.execute(
                "SELECT tar_file_id, sample_index FROM samples WHERE sample_key = ?", (row.sample_key,)
            ).fetchone()
            if found is not None:
                raise DuplicateSampleKeyError(row.sample_key, (found[0], found[1]), here) from None
            earlier[row.sample_key] = here

    def append_parts(self, rows: Iterable[IndexSamplePart]) -> None:
        """Add the part rows ``rows`` (each part's content bytes in its shard)."""
        self._open().executemany(
            "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, "
            "content_byte_size) VALUES (?, ?, ?, ?, ?)",
            ((r.tar_file_id, r.sample_index, r.part_name, r.content_byte_offset, r.content_byte_size) for r in rows),
        )

    def append_media_metadata_batch(self, rows: Iterable[IndexMediaMetadata]) -> None:
        """Add media metadata rows; a row for an entry already present replaces it."""
        if not self.enable_media_metadata:
            raise OptionError(
                f"append_media_metadata_batch on the index writer of {self.sqlite_path}, which has no media "
                f"tables; open it with enable_media_metadata=True"
            )
        self._open().executemany(
            "INSERT OR REPLACE INTO media_metadata (entry_key, metadata_type, metadata_json) VALUES (?, ?, ?)",
            ((r.entry_key, r.metadata_type, r.metadata_json) for r in rows),
        )

    def append_media_filter(self, *, strategy: str, patterns: str | None) -> None:
        """Record the media filter that chose the media files (once per ``(strategy, patterns)``)."""
        self._open().execute(
            "INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)", (strategy, patterns)
        )

    def close(self) -> None:
        """Build the lookup indices (when the sample tables were written), commit and close; again: nothing."""
        if self.db is None:
            return
        if self.enable_sample_tables:
            self.db.executescript(INDICES)
        self.db.commit()
        self.db.close()
        self.db = None

    def __enter__(self) -> SqliteIndexWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["DuplicateSampleKeyError", "SqliteIndexWriter"]
