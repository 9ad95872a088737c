"""Preparing a join: the rows of the join index from the joined datasets' own key indexes.

Each dataset's ``.nv-meta/index.sqlite`` lists every sample's key, shard and byte range.  The primary's
samples of its split (in split order, excluded samples left out) are matched by key in each secondary's
(a sample outside the secondary's split, or excluded there, is no match); ``nonmatch`` decides a row
without a match: ``error`` (the default) raises naming the key, ``skip`` drops the row (an inner join),
``none`` keeps it with ``None`` in that column (a left join).  The rows stream from sqlite in chunks: no
Python object per sample is kept.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import DatasetError
from ..metafiles import load_file
from ..webdataset import meta
from ..webdataset.splits import _expand, _meta_file, read_split

NONMATCH = ("error", "skip", "none")
"""What a join does with a primary sample that a secondary lacks (Energon's ``nonmatch``)."""
CHUNK = 1 << 16
"""Rows fetched from sqlite at once."""


@dataclass(frozen=True)
class Column:
    """One joined dataset as prepare reads it: where, which split (and split file), and its ``nonmatch``."""

    root: Path
    split: str
    split_config: str = "split.yaml"
    nonmatch: str = "error"

    def files(self) -> tuple[str, list[str], list[str], tuple[str, ...], dict[str, frozenset[str]], list[str]]:
        """``(uuid, sample excludes, info shards, split part shards (excluded ones counted), kept shards,
        excluded samples by shard)``, as Energon's join reads them."""
        root = self.root
        uuid_path = root / meta.META / "index.uuid"
        if not (root / meta.META / "index.sqlite").is_file() or not uuid_path.is_file():
            raise DatasetError(
                f"{root} has no {meta.META}/index.sqlite and index.uuid, which a join reads its keys from; prepare "
                f"it again (datareel prepare, or energon prepare with a recent Energon)"
            )
        info = meta.read_info(root)
        split = read_split(root, self.split, info, self.split_config)
        path = _meta_file(root, self.split_config, "split_config", "split")
        config = load_file(path)
        parts = _expand(config["split_parts"][self.split], path, f"split_parts[{self.split!r}]", info)
        excludes = [e for e in _expand(config.get("exclude"), path, "exclude", info) if "/" in e]
        return uuid_path.read_text(), excludes, list(info), parts, split.shards, split.excluded_samples


def build_rows(columns: list[Column]) -> tuple[Iterator[np.ndarray], dict[str, int]]:
    """The join index rows of ``columns`` (primary first) as chunks of int64[k, C, 3], and counters filled
    while they stream (``rows``, ``primary``, ``missing_<c>``)."""
    if len(columns) < 2:
        raise DatasetError(f"a join needs a primary and at least one more dataset, got {len(columns)}")
    if columns[0].nonmatch != "error":
        raise DatasetError(
            f"{columns[0].root}: the primary dataset of a join (the first) takes no nonmatch (got "
            f"{columns[0].nonmatch!r}); its samples are the join's rows. Set nonmatch on the others"
        )
    metas = [c.files() for c in columns]
    stats = {"rows": 0, "primary": 0, **{f"missing_{c}": 0 for c in range(1, len(columns))}}
    return _stream(columns, metas, stats), stats


def _stream(columns: list[Column], metas: list, stats: dict[str, int]) -> Iterator[np.ndarray]:
    db = sqlite3.connect(f"file:{columns[0].root / meta.META / 'index.sqlite'}?mode=ro", uri=True)
    try:
        for i, column in enumerate(columns[1:], start=1):
            db.execute(f"ATTACH DATABASE ? AS db{i}", (f"file:{column.root / meta.META / 'index.sqlite'}?mode=ro",))
        for i, column in enumerate(columns):
            schema = "main" if i == 0 else f"db{i}"
            twice = db.execute(
                f"SELECT sample_key FROM {schema}.samples GROUP BY sample_key HAVING COUNT(*) > 1 LIMIT 5"
            ).fetchall()
            if twice:
                raise DatasetError(
                    f"{column.root}: sample keys {[k for (k,) in twice]} occur more than once; a join matches by "
                    f"key, so keys must be unique: prepare the dataset with unique keys"
                )
        _, _, info0, parts0, kept0, _ = metas[0]
        position = {shard: p for p, shard in enumerate(parts0)}
        kept_set = set(kept0)
        order = [(t, position[s]) for t, s in enumerate(info0) if s in kept_set]
        db.execute("CREATE TEMP TABLE join_order (tar_file_id INTEGER PRIMARY KEY, split_index INTEGER)")
        db.executemany("INSERT INTO join_order VALUES (?, ?)", order)
        cols = ["m.tar_file_id", "m.sample_key", "m.byte_offset", "m.byte_size"]
        joins = []
        for i in range(1, len(columns)):
            cols += [f"d{i}.tar_file_id", f"d{i}.byte_offset", f"d{i}.byte_size"]
            joins.append(f"LEFT JOIN db{i}.samples d{i} ON d{i}.sample_key = m.sample_key")
        sql = (
            f"SELECT {', '.join(cols)} FROM main.samples m JOIN join_order o ON o.tar_file_id = m.tar_file_id "
            f"{' '.join(joins)} ORDER BY o.split_index, m.sample_index"
        )
        # per column: info shard id -> split part position, or -1 when the shard is not read in the split
        where = []
        for _, _, info, parts, kept, _ in metas:
            at, read = {shard: p for p, shard in enumerate(parts)}, set(kept)
            where.append(np.array([at[s] if s in read else -1 for s in info], dtype=np.int64))
        cursor = db.execute(sql)
        while rows := cursor.fetchmany(CHUNK):
            yield _chunk(rows, columns, metas, where, stats)
    finally:
        db.close()


def _chunk(
    rows: list, columns: list[Column], metas: list, where: list[np.ndarray], stats: dict[str, int]
) -> np.ndarray:
    out = np.empty((len(rows), len(columns), 3), dtype=np.int64)  # (k, C, 3)
    keep = np.ones(len(rows), dtype=bool)
    info0, excluded0 = metas[0][2], metas[0][5]
    for r, row in enumerate(rows):
        tar, key = row[0], row[1]
        if key in excluded0.get(info0[tar], ()):
            keep[r] = False
            continue
        stats["primary"] += 1
        out[r, 0] = (where[0][tar], row[2], row[3])
        for c in range(1, len(columns)):
            t, offset, size = row[1 + 3 * c : 4 + 3 * c]
            found = t is not None and where[c][t] >= 0 and key not in metas[c][5].get(metas[c][2][t], ())
            if found:
                out[r, c] = (where[c][t], offset, size)
                continue
            nonmatch = columns[c].nonmatch
            if nonmatch == "skip":
                keep[r] = False
                break
            if nonmatch == "none":
                out[r, c] = (-1, -1, -1)
                stats[f"missing_{c}"] += 1
                continue
            raise DatasetError(
                f"join: sample key {key!r} of {columns[0].root} (split {columns[0].split!r}) has no match in "
                f"{columns[c].root} (split {columns[c].split!r}); set nonmatch: skip (drop such samples) or "
                f"nonmatch: none (join None) on that dataset"
            )
    kept = out[keep]
    stats["rows"] += len(kept)
    return kept
