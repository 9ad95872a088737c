"""Formats own the meaning of bytes: one package per format, one :data:`FORMATS` list answering "what is
this path?" everywhere (``open_dataset``, metadataset entries, ``datareel info``, ``prepare``, the length
index).  Storage (:mod:`datareel.storage`) owns the bytes: a format reads every URL through its store.

- :mod:`.metadataset` — Energon metadataset YAML (``.yaml`` / ``.yml``): a blend of other datasets;
- :mod:`.jsonl` — ``X.jsonl`` with its ``X.jsonl.idx`` offsets;
- :mod:`.webdataset` — tar shards with ``.tar.idx`` and ``.nv-meta/`` (Energon's prepared layout): the
  directory or prefix no other format claims, last in the list; its errors say what a path is instead;
- :mod:`.metafiles` — safe, bounded JSON/YAML reading shared by them; :mod:`.base` — :class:`Format`.

A new format is a package here with a ``FORMAT`` (a :class:`Format`) and one line in :data:`FORMATS`, or,
from outside, :func:`register_format`.
"""

from __future__ import annotations

from typing import Any

from .base import Format
from .jsonl import FORMAT as JSONL
from .metadataset import FORMAT as METADATASET
from .webdataset import FORMAT as WEBDATASET

FORMATS: list[Format] = [METADATASET, JSONL, WEBDATASET]
"""The formats, asked in order: the first whose ``detect(path)`` is true owns the path."""


def format_of(path: Any) -> Format:
    """The format of ``path``: the first of :data:`FORMATS` that detects it (WebDataset, the last, takes any
    directory or prefix, and its reader says what the path is when it is not a prepared dataset)."""
    for found in FORMATS:
        if found.detect(path):
            return found
    return WEBDATASET  # FORMATS without its catch-all: a directory of shards, or what it explains


def register_format(found: Format, *, before: str = WEBDATASET.name) -> None:
    """Add a format to :data:`FORMATS`, asked before the one named ``before`` (default: before the
    WebDataset catch-all); a format of the same name is replaced."""
    from ..errors import OptionError

    if not isinstance(found, Format):
        raise OptionError(f"register_format takes a datareel.formats.Format, got {type(found).__name__}")
    if not callable(found.open):
        raise OptionError(f"format {found.name!r} has no open(path, ...): a registered format opens its datasets")
    kept = [f for f in FORMATS if f.name != found.name]
    names = [f.name for f in kept]
    if before not in names:  # checked before anything changes: a refused call leaves FORMATS as it was
        raise OptionError(f"before={before!r} names no registered format; they are {names}")
    kept.insert(names.index(before), found)
    FORMATS[:] = kept


def unregister_format(name: str) -> None:
    """Remove the format ``name`` that :func:`register_format` added."""
    FORMATS[:] = [f for f in FORMATS if f.name != name or f is WEBDATASET]


__all__ = [
    "FORMATS",
    "JSONL",
    "METADATASET",
    "WEBDATASET",
    "Format",
    "format_of",
    "register_format",
    "unregister_format",
]
