"""Sample lengths for packing and filters: a length index, byte sizes, or a function.

A *length index* is computed once by ``datareel prepare PATH --lengths module:function``
(the function gets each decoded sample and returns its length) and stored
beside the dataset's metadata — ``.nv-meta/lengths.npy`` for a prepared
directory, ``X.jsonl.lengths.npy`` for JSONL — with a ``.json`` sidecar
recording each shard's sample count and byte size.  It is memory-mapped at
load; if any shard changed since, it is refused as stale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError, OptionError
from .base import Source

LengthFn = Callable[[Source, np.ndarray], np.ndarray]
LengthSpec = str | LengthFn
"""``"index"`` (a prepared length index), ``"bytes"`` (each sample's bytes on disk) or
``fn(source, indices) -> lengths`` (vectorised, cheap: it runs in the main process)."""

_cache: dict[str, np.ndarray] = {}


def check_spec(length: Any, what: str) -> None:
    if not (callable(length) or length in ("index", "bytes")):
        raise OptionError(
            f"{what}: length={length!r} must be 'index' (a length index from `datareel prepare --lengths`), "
            f"'bytes', or a function fn(source, indices) -> lengths"
        )


def lengths_of(source: Source, indices: np.ndarray, length: LengthSpec) -> np.ndarray:
    """Lengths of samples ``indices`` of ``source``. indices: int64[k] -> int64[k]."""
    indices = np.asarray(indices, dtype=np.int64)
    if callable(length):
        out = np.asarray(length(source, indices))
        if out.shape != indices.shape or not np.issubdtype(out.dtype, np.integer):
            raise OptionError(
                f"the length function returned {out.dtype}{list(out.shape)} for {len(indices)} samples of "
                f"{source.name}; it must return one integer per index"
            )
        return out.astype(np.int64)
    if length == "bytes":
        return source.byte_sizes(indices)
    return load_index(source)[source.global_indices(indices)].astype(np.int64)


def load_index(source: Source) -> np.ndarray:
    """The source's length index, memory-mapped, after checking it is not stale. -> int64[N]"""
    path = source.length_index_path()
    key = str(path)
    if key in _cache:
        return _cache[key]
    side = Path(f"{path}.json")
    if not path.is_file() or not side.is_file():
        raise DatasetError(
            f"{source.name} has no length index ({path}); compute it with "
            f"`datareel prepare <dataset> --lengths module:function`, or pack by length='bytes'"
        )
    redo = "re-run `datareel prepare <dataset> --lengths module:function`"
    try:
        saved = json.loads(side.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not UTF-8, not JSON, huge ints, deep
        raise DatasetError(f"length index record {side} cannot be read ({type(exc).__name__}: {exc}); {redo}") from None
    recorded = saved.get("check") if isinstance(saved, dict) else None
    if not isinstance(recorded, dict):
        raise DatasetError(
            f"length index record {side} has no 'check' mapping (what each file held when the lengths were "
            f"computed); it is damaged: {redo}"
        )
    function = saved.get("function")
    if isinstance(function, str) and function:
        redo = f"re-run `datareel prepare <dataset> --lengths {function}`"
    current = source.length_index_check()
    if recorded != json.loads(json.dumps(current)):
        changed = sorted(k for k in set(recorded) | set(current) if recorded.get(k) != list(current.get(k, [])))
        raise DatasetError(
            f"length index {path} is stale: {changed[:5]} changed since it was computed "
            f"(sample count, bytes or content); {redo}"
        )
    try:
        index = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as exc:  # damaged, truncated, or an object array (never unpickled)
        raise DatasetError(f"length index {path} cannot be read ({type(exc).__name__}: {exc}); {redo}") from None
    count = sum(int(entry[0]) for entry in current.values())
    if index.shape != (count,) or not np.issubdtype(index.dtype, np.integer):
        raise DatasetError(
            f"length index {path} holds {index.dtype}{list(index.shape)}, not one integer per sample ({count}); "
            f"it is damaged: {redo}"
        )
    _cache[key] = index
    return index


def forget_index(path: str | Path) -> None:
    """Drop a cached length index (after it was rewritten)."""
    _cache.pop(str(path), None)
