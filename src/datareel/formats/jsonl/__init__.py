"""JSONL datasets: ``X.jsonl`` with its ``X.jsonl.idx`` offsets (Energon's layout); sample ``i`` is the
``i``-th non-blank line, ``{"__key__": str(i), "json": <object>}``.

- :mod:`.reader` — :class:`~datareel.formats.jsonl.reader.JsonlSource`, read by byte range through the store;
- :mod:`.prepare` — the writer: :func:`~datareel.formats.jsonl.prepare.prepare_jsonl` (``datareel prepare X.jsonl``).
"""

from __future__ import annotations

from typing import Any

from ...storage.path import as_path
from ..base import Format


def detect(path: Any) -> bool:
    """A ``.jsonl`` file (by its name)."""
    return as_path(path).suffix == ".jsonl"


def open_jsonl(path: Any, *, name: str | None = None, **ignored: Any) -> Any:
    """The JSONL file at ``path``. A JSONL file has no splits, parts or configs: ``split``, ``image_decode``,
    ``decode``, ``subflavors``, ``split_config`` and ``dataset_config`` do not apply to it (as ever)."""
    from .reader import JsonlSource

    return JsonlSource(as_path(path), name=name)


def problem(path: Any) -> str | None:
    """Why ``path`` cannot be read as a JSONL dataset (missing, not indexed), with the fix; ``None`` if it can."""
    p = as_path(path)
    if not p.exists():
        return f"{p} does not exist"
    if not as_path(f"{p}.idx").is_file():
        return f"{p} is not indexed ({p}.idx is missing); run `datareel prepare {p}`"
    return None


def info(path: Any) -> dict[str, Any]:
    from ...errors import DatasetError
    from ...sources.index_files import read_index

    p = as_path(path)
    found = problem(p)
    if found is not None:
        raise DatasetError(found)
    idx = read_index(f"{p}.idx")
    return {"path": str(p), "kind": "jsonl", "samples": len(idx) - 1, "bytes": p.stat().st_size}


def prepare_line(path: str, **ignored: Any) -> str:
    """``datareel prepare X.jsonl``: the index (a JSONL file has no splits, sample types or parts to map)."""
    from .prepare import prepare_jsonl

    return f"{path}: indexed {prepare_jsonl(path):,} samples into {path}.idx"


def every_sample(path: str) -> Any:
    from .reader import JsonlSource

    return JsonlSource(as_path(path))


FORMAT = Format(
    name="jsonl",
    detect=detect,
    open=open_jsonl,
    info=info,
    problem=problem,
    entry=lambda path, info, part: {"kind": "jsonl", "samples": info["samples"]},
    prepare=prepare_line,
    every_sample=every_sample,
)
"""JSONL, in :data:`datareel.formats.FORMATS`."""


def __getattr__(name: str) -> Any:  # the reader and writer, imported on first use
    if name in ("JsonlSource", "parse_json", "unparsable"):
        from . import reader

        return getattr(reader, name)
    if name == "prepare_jsonl":
        from .prepare import prepare_jsonl

        return prepare_jsonl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
