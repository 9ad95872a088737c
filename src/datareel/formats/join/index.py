"""The join index file: Energon's binary layout, memory-mapped.

``b"JIDX0001"``, the number of columns ``C`` (int64), then one row per joined sample of ``C`` triples
``(shard, byte offset, byte size)`` (int64; ``shard`` is the position in the column's split part as
``split.yaml`` lists it, excluded shards counted; ``(-1, -1, -1)`` where a secondary has no match).
Row ``r`` is primary sample ``r`` of the join.  Energon's ``prepare_metadataset`` writes the same file
under the same name (:func:`index_name`), so an index either one prepared serves both, except for joins
of one metadataset file that read the same datasets with other split parts: Energon's name omits the
split, so datareel names those by what they read (:func:`datareel.formats.join.index_path`).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DatasetError

MAGIC = b"JIDX0001"
HEADER = 16
"""Bytes before the first row: the magic and the column count."""


def index_name(columns: Iterable[tuple[str, list[str], str]]) -> str:
    """Energon's file name for a join of ``columns`` (``(dataset uuid, sample excludes, nonmatch)`` each,
    primary first): ``join_index_<sha256>.bin``.  Excludes are hashed sorted (Energon hashes them in a
    set's order, which varies between processes when there are several)."""
    digest = hashlib.sha256()
    for uuid, excludes, nonmatch in columns:
        digest.update(b"\0uuid=")
        digest.update(uuid.encode())
        digest.update(b"\0excludes=")
        for exclude in sorted(excludes):
            digest.update(exclude.encode())
            digest.update(b"\0")
        digest.update(f"\0nonmatch={nonmatch}\0".encode())
    return f"join_index_{digest.hexdigest()}.bin"


def write_index(path: Path, columns: int, chunks: Iterable[np.ndarray]) -> int:
    """Write ``chunks`` (int64[k, columns, 3] each) to ``path`` (staged, then renamed into place) -> rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    rows = 0
    try:
        with open(staged, "wb") as out:
            out.write(MAGIC + struct.pack("<q", columns))
            for chunk in chunks:
                chunk = np.ascontiguousarray(chunk, dtype="<i8")  # (k, columns, 3)
                out.write(chunk.tobytes())
                rows += len(chunk)
        os.replace(staged, path)
    finally:
        if staged.exists():
            staged.unlink()
    return rows


class JoinIndex:
    """A join index file at ``path`` (local), opened on first use in each process."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(HEADER)
        except FileNotFoundError:
            raise DatasetError(
                f"join index {self.path} does not exist: prepare the metadataset first "
                f"(megatron.energon.metadataset.loader.prepare_metadataset, or `energon prepare` on the YAML); after "
                f"the YAML or a joined dataset changed, prepare it again"
            ) from None
        except OSError as exc:
            raise DatasetError(f"cannot read join index {self.path}: {exc.strerror or exc}") from None
        if len(head) != HEADER or head[:8] != MAGIC:
            raise DatasetError(f"{self.path} is not a join index (magic {head[:8]!r}); prepare the metadataset again")
        self.columns = struct.unpack("<q", head[8:])[0]
        row = self.columns * 3 * 8
        if self.columns < 2 or (size - HEADER) % row:
            raise DatasetError(
                f"{self.path}: {self.columns} columns and {size - HEADER} bytes of rows do not fit ({row} bytes a "
                f"row); the file is damaged: prepare the metadataset again"
            )
        self.rows = (size - HEADER) // row
        self._map: np.ndarray | None = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return self.rows

    def table(self) -> np.ndarray:
        """The rows, memory-mapped. -> int64[rows, columns, 3]"""
        if self._map is None or self._pid != os.getpid():
            self._map = np.memmap(self.path, dtype="<i8", mode="r", offset=HEADER, shape=(self.rows, self.columns, 3))
            self._pid = os.getpid()
        return self._map

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None, "_pid": None}
