"""Energon's ``prepare_dataset`` on datareel's writer (:mod:`datareel.formats.webdataset.prepare_shards`):
index the shards a caller names, then write ``.info.json`` and the split config, with Energon's meaning
of every argument — what it writes real Energon reads too.

Where datareel differs: a duplicate key, a missing or an empty shard raise
:class:`~datareel.errors.DatasetError` naming it (Energon prints and exits the process, or fails an
assertion); ``fix_duplicates=True`` (Energon rewrites the shards in place) is refused; split lists are
written expanded (Energon collapses them into brace patterns: both read the same shards); ``workers`` is
a maximum (a small dataset is scanned in this process).

Also here, as in Energon: the index rows its indexing workers send
(:class:`IndexSample`, :class:`IndexSamplePart`, :class:`IndexMediaMetadata`), which
:class:`~datareel.energon.flavors.webdataset.indexing.SqliteIndexWriter` writes.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from braceexpand import braceexpand

from ....errors import DatasetError, OptionError
from ....formats.webdataset.prepare_shards import (
    index_shards,
    meta_file_exists,
    write_info,
    write_meta_file,
    write_split,
)
from ....storage.path import location_of
from .config import INFO_JSON_FILENAME, INFO_YAML_FILENAME


@dataclass(frozen=True)
class IndexAggregatable:
    """Base of the records an indexing worker sends to the process that writes the index."""


@dataclass(frozen=True)
class IndexSample(IndexAggregatable):
    """One row of ``samples`` in ``index.sqlite``: sample ``sample_index`` of shard ``tar_file_id`` (its
    position in ``.info.json``'s ``shard_counts``) is the tar bytes ``[byte_offset, byte_offset + byte_size)``."""

    tar_file_id: int
    sample_key: str
    sample_index: int
    byte_offset: int
    byte_size: int


@dataclass(frozen=True)
class IndexSamplePart(IndexAggregatable):
    """One row of ``sample_parts``: part ``part_name`` of a sample, its content's bytes in the shard."""

    tar_file_id: int
    sample_index: int
    part_name: str
    content_byte_offset: int
    content_byte_size: int


@dataclass(frozen=True)
class IndexMediaMetadata(IndexAggregatable):
    """One row of ``media_metadata``: the metadata (``metadata_type`` ``image`` or ``av``, as JSON) of the
    media file ``entry_key`` (``"<sample key>.<part>"``)."""

    entry_key: str
    metadata_type: str
    metadata_json: str


def _identity(items: Iterator[Any], total: int) -> Iterator[Any]:
    return items


def prepare_dataset(
    parent_path: Any,
    paths: list[str],
    *,
    split_parts_ratio: list[tuple[str, float]] | None = None,
    split_parts_patterns: list[tuple[str, str]] | None = None,
    split_config: str = "split.yaml",
    shuffle_seed: int | None = 42,
    progress_fn: Callable[[Iterator[Any], int], Iterator[Any]] = _identity,
    workers: int = 32,
    tar_index_only: bool = False,
    media_filter: Any = None,
    fix_duplicates: bool = False,
    index_sqlite_tmp_path: Any = None,
) -> set[str]:
    """Index the shards ``paths`` (relative to ``parent_path``, brace patterns expanded), write each one's
    ``.tar.idx``, ``.nv-meta/index.sqlite``, ``index.uuid``, ``.info.json`` and the split config
    ``split_config`` (YAML or JSON), and return the part names found (at most 50), as Energon does.

    Splits: ``split_parts_ratio`` ``[(name, share), ...]`` cuts the shards (shuffled first with
    ``random.Random(shuffle_seed)`` unless ``shuffle_seed`` is None) by cumulative share;
    ``split_parts_patterns`` ``[(name, regex), ...]`` puts each shard whose path matches into the split.
    ``tar_index_only`` writes the index files and stops there.  ``media_filter`` (Energon's
    ``MediaFilterConfig``) stores media metadata in the sqlite index; ``index_sqlite_tmp_path`` is where
    the sqlite index is built before it is moved or uploaded."""
    if fix_duplicates:
        raise OptionError(
            "fix_duplicates=True: datareel does not rewrite shards in place (Energon's tar patcher moves each "
            "member under a folder named after its shard); rename the duplicate keys in the shards, then prepare"
        )
    if split_parts_ratio is not None and split_parts_patterns is not None:
        raise OptionError("pass split_parts_ratio= or split_parts_patterns=, not both (one rule cuts the splits)")
    if not tar_index_only and split_parts_ratio is None and split_parts_patterns is None:
        raise OptionError(
            "prepare_dataset needs split_parts_ratio=[('train', 1.0), ...] or split_parts_patterns=[('train', "
            "regex), ...] to write the split config (or tar_index_only=True)"
        )
    if not (split_config.endswith(".yaml") or split_config.endswith(".json")):
        raise OptionError(f"split_config={split_config!r} must name a .yaml or .json file")
    if isinstance(paths, str):
        raise OptionError(f"paths={paths!r} must be a list of shard paths (brace patterns allowed), not one string")
    root = location_of(parent_path)
    shards = [shard for pattern in paths for shard in braceexpand(pattern)]
    ticks = progress_fn(iter(range(len(shards))), len(shards))
    found = index_shards(
        root,
        shards,
        workers=workers,
        on_shard=lambda: next(ticks, None),
        media=media_filter,
        serialize_media=_serializer() if media_filter is not None else None,
        sqlite_build_path=index_sqlite_tmp_path,
    )
    if tar_index_only:
        if meta_file_exists(root, INFO_YAML_FILENAME) and not meta_file_exists(root, INFO_JSON_FILENAME):
            legacy = _read_meta(root, INFO_YAML_FILENAME)
            write_meta_file(root, INFO_JSON_FILENAME, json.dumps(yaml.safe_load(legacy), indent=2))
        return found.parts
    write_info(root, found.counts)
    names = list(found.counts)
    if split_parts_ratio is not None:
        splits = split_by_ratio(names, split_parts_ratio, shuffle_seed)
    else:
        splits = split_by_patterns(names, split_parts_patterns or [])
    write_split(root, split_config, splits)
    return found.parts


def split_by_ratio(shards: list[str], ratio: list[tuple[str, float]], seed: int | None) -> dict[str, list[str]]:
    """Energon's cut: shares normalised, the shards shuffled by ``random.Random(seed)`` (unless None), each
    split ending at ``int(len(shards) * cumulative share)``."""
    total = sum(share for _, share in ratio)
    if not ratio or total <= 0 or any(share < 0 for _, share in ratio):
        raise OptionError(f"split_parts_ratio={ratio!r} must hold non-negative shares with a positive sum")
    order = list(shards)
    if seed is not None:
        random.Random(seed).shuffle(order)
    out: dict[str, list[str]] = {}
    cumulative, start = 0.0, 0
    for name, share in ratio:
        cumulative += share / total
        stop = int(len(order) * cumulative)
        out[name] = order[start:stop]
        start = stop
    return out


def split_by_patterns(shards: list[str], patterns: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Each split: the shards (in order) whose path matches one of its brace-expanded regular expressions."""
    out: dict[str, list[str]] = {}
    for name, pattern in patterns:
        try:
            compiled = [re.compile(p) for p in braceexpand(pattern)]
        except re.error as exc:
            raise OptionError(f"split_parts_patterns: {pattern!r} of split {name!r} is not a regex: {exc}") from None
        out[name] = [shard for shard in shards if any(c.match(shard) for c in compiled)]
    return out


def _read_meta(root: str, name: str) -> str:
    from ....storage.path import as_path

    return (as_path(root) / ".nv-meta" / name).read_text()


def _serializer() -> Callable[[Any], tuple[str, str]]:
    try:
        from ...media.metadata import serialize_media_metadata
    except ImportError as exc:
        raise DatasetError(
            f"media_filter= needs datareel.energon.media.metadata.serialize_media_metadata to store media "
            f"metadata ({exc}); prepare without media_filter, or with a datareel that has it"
        ) from None
    return serialize_media_metadata


__all__ = [
    "IndexAggregatable",
    "IndexMediaMetadata",
    "IndexSample",
    "IndexSamplePart",
    "prepare_dataset",
    "split_by_patterns",
    "split_by_ratio",
]
