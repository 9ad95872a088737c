"""Joins of prepared datasets by sample key: the join index (:mod:`.index`, Energon's file) and how prepare
computes it from the datasets' key indexes (:mod:`.build`).  The joined source that reads it is
:class:`datareel.sources.joined.JoinedSource`; a metadataset's ``join:`` builds one
(:mod:`datareel.blend.join`)."""

from __future__ import annotations

from pathlib import Path

from .build import NONMATCH, Column, build_rows
from .index import JoinIndex, index_name, write_index


def index_path(cache_dir: Path, columns: list[Column]) -> Path:
    """Where the join index of ``columns`` lives in ``cache_dir`` (Energon's name: it changes when a
    dataset is prepared again, its excludes or a ``nonmatch`` change)."""
    keys = []
    for column in columns:
        uuid, excludes, *_ = column.files()
        keys.append((uuid, excludes, column.nonmatch))
    return Path(cache_dir) / index_name(keys)


def prepare_join(cache_dir: Path, columns: list[Column]) -> tuple[Path, dict[str, int]]:
    """Write the join index of ``columns`` into ``cache_dir`` unless it is there -> (its path, counters:
    ``rows``, ``primary``, ``missing_<c>``; empty when it was already prepared)."""
    path = index_path(cache_dir, columns)
    if path.is_file():
        return path, {}
    chunks, stats = build_rows(columns)
    write_index(path, len(columns), chunks)
    return path, stats


__all__ = ["NONMATCH", "Column", "JoinIndex", "build_rows", "index_name", "index_path", "prepare_join", "write_index"]
