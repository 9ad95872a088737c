"""Energon's ``megatron.energon.metadataset.metadataset_v2``: ``MetadatasetV2`` — a metadataset's splits as
Energon reads them for ``get_datasets`` (the flattened leaves of a split, weights multiplied down to
absolute ones, repetitions multiplied, subflavors merged outer-over-inner, multipliers combined by
Energon's rule, subsets merged) and for ``traverse`` (leaf paths, split parts, aux paths, subflavors).

The reel itself is built from the same file by :mod:`datareel.blend.metadataset` (what
``get_train_dataset`` reads); this module answers the questions Energon's objects answer.  ``prepare``
writes the join indexes a split's joins read
(:func:`datareel.blend.join.prepare_joins`).  ``AuxFilesystemReference`` / ``AuxDatasetReference``
are the two kinds of ``aux:`` entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...errors import DatasetError
from ..multiplier import energon_multiplier
from .loader_interface import DatasetLoaderInterface, LoadedDatasetList, TraversedDatasetReference

__all__ = ["AuxDatasetReference", "AuxFilesystemReference", "DatasetSubset", "MetadatasetV2"]

_URL = re.compile(r"^(?P<protocol>[a-z][a-z0-9+.-]*)://(?P<path>.*)", re.IGNORECASE)


@dataclass(frozen=True)
class DatasetSubset:
    """Energon's subset of a leaf: ``range`` (shares of it, ``(0, 1)`` = all) after ``absolute_range``
    (sample indices ``(start, end)``, ``end`` ``None`` for the end; leaves only)."""

    range: tuple[float, float] | None = (0.0, 1.0)
    absolute_range: tuple[int, int | None] | None = None


def parse_subset(spec: Any, where: str) -> DatasetSubset:
    """``{range: [a, b]}`` (``"N%"``, integers, ``"end"``) -> a :class:`DatasetSubset`, as Energon's ``Subset``."""
    if not (isinstance(spec, dict) and isinstance(spec.get("range"), list) and len(spec["range"]) == 2):
        raise DatasetError(f"{where}.subset must be {{range: [start, end]}}, got {spec!r:.80}")

    def value(v: Any) -> float | int | None:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip() == "end":
            return None
        if isinstance(v, str) and v.endswith("%"):
            try:
                share = float(v[:-1])
            except ValueError:
                share = -1.0
            if 0 <= share <= 100:
                return share / 100
        raise DatasetError(f"{where}.subset range value {v!r} must be 'N%' (0 to 100), an integer or 'end'")

    start, end = (value(v) for v in spec["range"])
    if isinstance(start, int):
        if not (end is None or isinstance(end, int)):
            raise DatasetError(f"{where}.subset: an integer start needs an integer end or 'end', got {end!r}")
        return DatasetSubset(range=(0.0, 1.0), absolute_range=(start, end))
    if not isinstance(start, float) or not isinstance(end, float) or start > end:
        raise DatasetError(f"{where}.subset: shares need start <= end (both 'N%'), got {spec['range']!r}")
    return DatasetSubset(range=(start, end))


def merge_subset(own: DatasetSubset | None, outer: DatasetSubset | None, where: str) -> DatasetSubset | None:
    """This node's subset composed with the one its parents give (Energon's ``Subset.merge``)."""
    if outer is not None and outer.absolute_range is not None:
        raise DatasetError(f"{where}: absolute subset ranges are only allowed for a leaf dataset, not on a blend")
    if own is None:
        return outer
    if outer is None or outer.range is None:
        return own
    lo, hi = own.range or (0.0, 1.0)
    total = hi - lo
    return DatasetSubset(
        range=(lo + outer.range[0] * total, lo + outer.range[1] * total), absolute_range=own.absolute_range
    )


@dataclass
class AuxDatasetReference:
    """An ``aux:`` entry naming a prepared dataset (read by key through a WebDataset file store)."""

    path: Any

    def get_file_store(self) -> Any:
        from ..cache.file_store import WebdatasetFileStore

        return WebdatasetFileStore(self.path)


@dataclass
class AuxFilesystemReference:
    """An ``aux:`` entry naming a directory of files (``filesystem://DIR``, ``filesystem+msc://...``)."""

    fs_path: Any

    def get_file_store(self) -> Any:
        from ..cache.file_store import SystemFileStore

        return SystemFileStore(self.fs_path)


def aux_reference(value: Any, mds_dir: Any, where: str) -> AuxDatasetReference | AuxFilesystemReference:
    """One ``aux:`` value resolved against the metadataset's directory, as Energon normalises it."""
    from ..epathlib import EPath

    if not isinstance(value, str) or not value:
        raise DatasetError(f"{where}: aux value {value!r} must be a path (a prepared dataset or filesystem://DIR)")
    match = _URL.match(value)
    if match is None:
        return AuxDatasetReference(path=mds_dir / value)
    protocol = match.group("protocol")
    if protocol == "filesystem":
        return AuxFilesystemReference(fs_path=mds_dir / match.group("path"))
    if protocol.startswith("filesystem+") and protocol.count("+") == 1:
        return AuxFilesystemReference(fs_path=EPath(f"{protocol.split('+')[1]}://{match.group('path')}"))
    if "+" in protocol:
        raise DatasetError(f"{where}: aux value {value!r}: the only prefix is filesystem+ (filesystem+msc://...)")
    return AuxDatasetReference(path=EPath(value))


class MetadatasetV2(DatasetLoaderInterface):
    """A metadataset (``__class__: MetadatasetV2``) at ``path`` with its parsed ``splits``."""

    version = 2

    def __init__(self, path: Any, splits: dict[str, Any]):
        from ..epathlib import EPath

        self.path, self.splits = EPath(path), splits

    def split(self, split_part: str) -> Any:
        if split_part not in self.splits:
            raise DatasetError(f"{self.path}: split {split_part!r} is not defined; it defines {sorted(self.splits)}")
        return self.splits[split_part]

    def post_initialize(self, mds_path: Any = None) -> None:
        """Check that every split's datasets exist (Energon checks when loading the file)."""
        from .walk import check_exists

        for name, node in self.splits.items():
            check_exists(self, node, f"{self.path}: splits.{name}")

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        from .walk import traverse_node

        return traverse_node(self, self.split(split_part), split_part, dict(_subflavors or {}), f"splits.{split_part}")

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        subset: Any = None,
        **kwargs: Any,
    ) -> LoadedDatasetList:
        from .walk import Request, node_datasets

        multiplier = energon_multiplier(shuffle_over_epochs_multiplier, f"{self.path}: get_datasets: ")
        request = Request(training, worker_config, kwargs)
        where = f"{self.path}: splits.{split_part}"
        return node_datasets(self, self.split(split_part), request, split_part, subflavors, multiplier, subset, where)

    def prepare(self, split_part: str | None = None) -> tuple[Any, ...]:
        """Write the join index of each join of the split(s) not prepared yet (and of the metadatasets they
        include, each in its own ``.cache``); other files of this file's cache directory are removed
        (Energon's cleanup).  Returns ``()``, as Energon's."""
        from ...blend.join import prepare_joins
        from ...storage.path import as_path
        from .loader import load_metadataset_file
        from .walk import join_nodes

        found: list[Any] = []
        nested: list[Any] = []
        for name, node in self.splits.items():
            if split_part is None or name == split_part:
                join_nodes(self, node, name, f"{self.path}: splits.{name}", found, nested)
        for target in dict.fromkeys(str(t) for t in nested):
            load_metadataset_file(target).prepare()
        prepare_joins(as_path(str(self.path)), found)
        return ()
