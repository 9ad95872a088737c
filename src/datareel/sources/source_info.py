"""Where a sample was read from: :class:`SourceInfo` records (Energon's ``__sources__`` entries).

A sample's ``__sources__`` is a tuple of records, one per read that made it: the primary read (the
sample's own parts) and one per auxiliary lookup a cooker made.  Records are small frozen values, so
they cross worker queues and compare by value.

Every reader of a prepared dataset puts the record of its own read on each sample it makes, with what
Energon's readers put there: a WebDataset sample's ``SourceInfo(dataset_path=<root: its EPath where the facade
registered that type (:func:`register_record_path`), else its path string>, index=<its index
in the split, excluded samples counted>, shard_name=<shard as the split names it>, file_names=<the tar
members read, in tar order>)``; a JSONL line's ``SourceInfo(dataset_path=<the file's path, a str>,
index=<line number>, shard_name=<the file's name>, file_names=("<index>.json",))``.  Views, subsets and
blends pass samples through unchanged, so the record names the dataset that was read, as Energon's do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DatareelError


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """One read: the dataset's path, the sample's index there (an int for a dataset's own sample, the
    file name for a lookup by key), the shard (tar file, relative to the dataset) and the file names read."""

    dataset_path: Any
    index: str | int | None
    shard_name: str | None
    file_names: tuple[str, ...]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # its four values, remade by make_source_info: a tenth of the default (per-field state) cost, which
        # every sample pays crossing the worker queue
        return make_source_info, (self.dataset_path, self.index, self.shard_name, self.file_names)


_new, _set = object.__new__, object.__setattr__


def make_source_info(
    dataset_path: Any, index: str | int | None, shard_name: str | None, file_names: tuple[str, ...]
) -> SourceInfo:
    """``SourceInfo(dataset_path=..., index=..., shard_name=..., file_names=...)`` made without the frozen
    keyword ``__init__`` (a quarter of its cost): how readers make one per sample, and unpickling."""
    info = _new(SourceInfo)
    _set(info, "dataset_path", dataset_path)
    _set(info, "index", index)
    _set(info, "shard_name", shard_name)
    _set(info, "file_names", file_names)
    return info


_record_path: Callable[[str], Any] | None = None


def register_record_path(factory: Callable[[str], Any] | None) -> None:
    """Make records' ``dataset_path`` with ``factory`` (the dataset's path or URL as a string -> the value;
    ``None``: the string itself).  ``datareel.energon`` registers its ``EPath`` when it loads, so a dataset
    opened with the facade loaded names itself in records as Energon's readers do; the value is made when the
    dataset is opened and travels with it to worker processes."""
    global _record_path
    _record_path = factory


def dataset_path(root: Any) -> Any:
    """The ``dataset_path`` of records of the dataset at ``root``: ``str(root)``, or what the registered
    factory makes of it (:func:`register_record_path`; ``str(root)`` where the factory refuses it)."""
    factory = _record_path
    if factory is None:
        return str(root)
    try:
        return factory(str(root))
    except (ValueError, DatareelError):  # e.g. a store EPath has no scheme for (http://, gs://): its URL
        return str(root)


def jsonl_source_info(path: Any, index: int) -> SourceInfo:
    """The record of line ``index`` of the JSONL file at ``path`` (a path or URL), as Energon's JSONL reader
    makes it: the file's path as a string, the line number, the file's name and ``"<index>.json"``."""
    url = str(path)
    return make_source_info(url, index, url.rstrip("/").rpartition("/")[2], (f"{index}.json",))


def source_info_of(source: Any, index: int) -> tuple[SourceInfo, ...] | None:
    """The records of sample ``index`` of ``source`` without decoding it (what an error handler is told of a
    sample that failed to decode or encode): through views, filters and aux sources to the reader, which
    names its read (``source_info(index)``); ``None`` where no reader on the way keeps records, or where
    making them fails (a WebDataset reader re-reads the members to name them: for a sample whose bytes
    failed that fails alike, and must not replace the sample's own error)."""
    import numpy as np

    from .base import MappedSource

    try:
        while True:
            own = getattr(type(source), "source_info", None)
            if own is not None:
                found = own(source, index)
                return (found,) if isinstance(found, SourceInfo) else found
            if not isinstance(source, MappedSource):
                return None
            index = int(source._map(np.array([index], dtype=np.int64))[0])
            source = source.base
    except Exception:  # a report of where, never a second failure
        return None


RECORDS = "__datareel_sources__"
"""The attribute of an exception that holds the records of the sample that raised it."""


def note_records(exc: BaseException, records: Any) -> None:
    """Note ``records`` on ``exc`` for error handlers; never raises (a frozen dataclass exception, or one
    whose ``__setattr__`` refuses, keeps no records rather than a second error)."""
    try:
        object.__setattr__(exc, RECORDS, records)
    except Exception:
        pass


def failure_records(exc: BaseException, source: Any, index: int) -> tuple[SourceInfo, ...] | None:
    """The records of the sample ``index`` of ``source`` that raised ``exc``: those already noted on it
    (:func:`note_records`, no second read), else :func:`source_info_of`; never raises."""
    try:
        known = exc.__dict__.get(RECORDS)
    except Exception:
        known = None
    return known if known is not None else source_info_of(source, index)


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
