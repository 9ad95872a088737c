"""Offset index files: ``X.tar.idx`` and ``X.jsonl.idx``.

Layout (Energon's): ``count + 1`` little-endian uint64 offsets, no header.
Entry ``i`` is where sample ``i`` begins (for a tar, its first header,
including PAX / GNU long-name headers); the last entry is where the last
sample ends.  Sample ``i`` is the byte range ``[idx[i], idx[i+1])``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import DatasetError, NotFound
from ..storage import files_for

DTYPE = np.dtype("<u8")


MAP_FROM = 1 << 16
"""Index files of this size and more (shards of 8,191+ samples) are memory-mapped where the store can
(local files: shared, reclaimable pages; one more descriptor); smaller ones are read whole (cheaper to
open: a shard evicted from the open set and opened again pays this each time), at most 64 KiB per open
shard.  An index in a bucket is fetched whole, once per process."""


def read_index(path: str | os.PathLike[str]) -> np.ndarray:
    """An index file's offsets, read through the store of ``path`` (a large local one is mapped).
    -> uint64[count + 1] (read-only)"""
    url = str(path)
    try:
        data = files_for(url).view(url, map_from=MAP_FROM)
    except (FileNotFoundError, NotFound):
        raise NotFound(f"index file {url} is missing; run `datareel prepare` on the dataset to write it") from None
    _check_size(len(data), url)
    return np.frombuffer(data, dtype=DTYPE)


def _check_size(size: int, path: object) -> None:
    """Refuse an index file that is not a whole number (>= 1) of 8-byte offsets."""
    if size < DTYPE.itemsize or size % DTYPE.itemsize:
        raise DatasetError(
            f"index file {path} has {size} bytes, not a whole number (>= 1) of 8-byte offsets; it is "
            f"damaged: re-run `datareel prepare`"
        )


def write_index(path: Path | BinaryIO, offsets: np.ndarray) -> None:
    """Write ``offsets`` (uint64[count + 1]) to ``path`` (the caller renames it into place), or append
    them to a file being written."""
    np.asarray(offsets, dtype=DTYPE).tofile(path)


def sample_range(idx: np.ndarray, i: int, path: Callable[[], object]) -> tuple[int, int]:
    """Sample ``i``'s byte range ``[idx[i], idx[i+1])``, refused unless it lies inside the indexed bytes
    (a damaged index must not ask for a negative or terabyte read).  ``path()`` names the index file
    (called only for the error: this is on every read)."""
    start, stop, end = int(idx[i]), int(idx[i + 1]), int(idx[-1])
    if not 0 <= start <= stop <= end:
        raise DatasetError(
            f"index file {path()}: sample {i} spans bytes [{start}, {stop}), which is not inside the indexed "
            f"[0, {end}); the index is damaged: re-run `datareel prepare`"
        )
    return start, stop
