"""What an entry of a metadataset names besides its datasets: a ``subset`` (:class:`DatasetSubset`, Energon's
arithmetic: :func:`parse_subset`, :func:`merge_subset`) and an ``aux:`` entry (:class:`AuxDatasetReference`,
:class:`AuxFilesystemReference`, :func:`aux_reference`); values, read by the walk (:mod:`.walk`) and the views
(:mod:`.views`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...errors import DatasetError
from ..epathlib import EPath

__all__ = [
    "AuxDatasetReference",
    "AuxFilesystemReference",
    "DatasetSubset",
    "aux_reference",
    "merge_subset",
    "parse_subset",
]

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
