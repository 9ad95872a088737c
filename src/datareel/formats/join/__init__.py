"""Joins of prepared datasets by sample key: the join index (:mod:`.index`, Energon's file) and how prepare
computes it from the datasets' key indexes (:mod:`.build`).  The joined source that reads it is
:class:`datareel.sources.joined.JoinedSource`; a metadataset's ``join:`` builds one
(:mod:`datareel.blend.join`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from ...errors import DatasetError
from .build import NONMATCH, Column, build_rows
from .index import JoinIndex, index_name, write_index


def _identity(columns: list[Column]) -> tuple[str, tuple[object, ...]]:
    """``(Energon's file name, what the join reads)`` of ``columns``: Energon's name hashes each dataset's
    uuid, sample excludes and ``nonmatch``; what it reads adds each split part's shards (in order) and the
    shards kept, which Energon's name omits."""
    keys, reads = [], []
    for column in columns:
        uuid, excludes, _, parts, kept, _ = column.files()
        keys.append((uuid, excludes, column.nonmatch))
        reads.append((uuid, tuple(sorted(excludes)), column.nonmatch, tuple(parts), tuple(sorted(kept))))
    return index_name(keys), tuple(reads)


def clashes(columns: list[Column], others: Iterable[tuple[list[Column], str]]) -> list[str]:
    """The ``where`` of each of ``others`` (the other joins of the same metadataset file, any split) that
    Energon would give the same index file as ``columns`` although it reads other samples (another split
    part): Energon prepares such joins into one file, so all but one would read another's rows."""
    name, reads = _identity(columns)
    out = []
    for other, where in others:
        try:
            other_name, other_reads = _identity(other)
        except DatasetError:
            continue  # a join whose datasets cannot be read is refused when it is loaded or prepared
        if other_name == name and other_reads != reads and where not in out:
            out.append(where)
    return out


def index_path(cache_dir: Path, columns: list[Column], others: Iterable[tuple[list[Column], str]] = ()) -> Path:
    """Where the join index of ``columns`` lives in ``cache_dir``: Energon's name (it changes when a dataset
    is prepared again, its excludes or a ``nonmatch`` change), unless another join of the same file
    (``others``: ``(columns, where)`` each) :func:`clashes` with it; then a name that adds a digest of
    the split parts it reads (``join_index_<energon's hash>-<16 hex>.bin``), for every join of the clash."""
    name, reads = _identity(columns)
    if not clashes(columns, others):
        return Path(cache_dir) / name
    digest = hashlib.sha256(repr(reads).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{name[: -len('.bin')]}-{digest}.bin"


def energon_index_path(cache_dir: Path, columns: list[Column]) -> Path:
    """Energon's name for the join index of ``columns`` (whatever else the file joins)."""
    return Path(cache_dir) / _identity(columns)[0]


def prepare_join(
    cache_dir: Path, columns: list[Column], others: Iterable[tuple[list[Column], str]] = ()
) -> tuple[Path, dict[str, int]]:
    """Write the join index of ``columns`` into ``cache_dir`` unless it is there -> (its path, counters:
    ``rows``, ``primary``, ``missing_<c>``; empty when it was already prepared); ``others`` as for
    :func:`index_path`."""
    path = index_path(cache_dir, columns, others)
    if path.is_file():
        return path, {}
    chunks, stats = build_rows(columns)
    write_index(path, len(columns), chunks)
    return path, stats


__all__ = [
    "NONMATCH",
    "Column",
    "JoinIndex",
    "build_rows",
    "clashes",
    "energon_index_path",
    "index_name",
    "index_path",
    "prepare_join",
    "write_index",
]
