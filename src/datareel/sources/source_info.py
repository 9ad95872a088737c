"""Where a sample was read from: :class:`SourceInfo` records (Energon's ``__sources__`` entries).

A sample's ``__sources__`` is a tuple of records, one per read that made it: the primary read (the
sample's own parts) and one per auxiliary lookup a cooker made.  Records are small frozen values, so
they cross worker queues and compare by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """One read: the dataset's path, the sample's index there (an int for a dataset's own sample, the
    file name for a lookup by key), the shard (tar file, relative to the dataset) and the file names read."""

    dataset_path: Any
    index: str | int | None
    shard_name: str | None
    file_names: tuple[str, ...]


def add_source_info(sample: Any, *infos: SourceInfo) -> Any:
    """``sample`` with ``infos`` appended to its ``__sources__`` (a dataclass sample's field, a dict
    sample's key); any other value is returned unchanged."""
    if isinstance(sample, dict):
        sample["__sources__"] = (*(sample.get("__sources__") or ()), *infos)
    elif hasattr(sample, "__sources__"):
        sample.__sources__ = (*(sample.__sources__ or ()), *infos)
    return sample


def get_source_info(sample: Any) -> list[SourceInfo] | None:
    """The records of a sample (dict or dataclass) or of a list of samples; ``None`` when there are none."""
    if isinstance(sample, list):
        found = [info for s in sample for info in (get_source_info(s) or ())]
        return found or None
    if isinstance(sample, dict):
        sources = sample.get("__sources__")
    else:
        sources = getattr(sample, "__sources__", None)
    return list(sources) if sources else None
