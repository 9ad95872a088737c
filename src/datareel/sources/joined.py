"""A joined source: sample ``r`` is row ``r`` of a join index — the primary's sample and, by key, each
secondary's (``None`` where a left join found none) — combined by the joiner.

The rows are fixed when the join is prepared (:mod:`datareel.formats.join`), so the source is an
ordinary finite, random-access source: the reel permutes its rows like any other, and a row is read with
one lookup per column (the index is memory-mapped: nothing O(N) in Python objects).  Every secondary read
is checked to carry the primary's key, so an index that no longer fits the datasets is named, never read.

The joiner gets the samples as arguments (a ``join:`` list) or as keyword arguments by name (a mapping);
a :class:`~datareel.sources.typed.Sample` class joins with its ``from_joined`` (Energon's default where the
class has none, :func:`~datareel.sources.typed.default_from_joined`: the primary's key, restore key and
subflavors, every sample's fields, later ones winning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DatasetError
from .base import Source


class JoinedSource(Source):
    """Rows of ``index`` (a :class:`~datareel.formats.join.JoinIndex`) over ``columns`` (the joined
    :class:`~datareel.formats.webdataset.reader.WebDatasetSource` splits, primary first).

    ``parts[c]`` maps column ``c``'s split part positions (as the index stores them) to its shard numbers
    (``-1``: excluded); ``names`` are the joiner's keyword names (``None``: positional)."""

    def __init__(
        self,
        columns: list[Any],
        index: Any,
        parts: list[np.ndarray],
        joiner: Callable[..., Any],
        *,
        names: tuple[str, ...] | None = None,
        name: str,
        joiner_name: str = "",
    ):
        if index.columns != len(columns):
            raise DatasetError(
                f"join index {index.path} has {index.columns} columns for a join of {len(columns)} datasets; "
                f"prepare the metadataset again"
            )
        if len(index) == 0:
            raise DatasetError(f"the join {name} holds no samples (join index {index.path}): no primary key matched")
        self.columns, self.index, self.parts = list(columns), index, parts
        self.joiner, self.names, self.name, self.joiner_name = joiner, names, name, joiner_name

    def __len__(self) -> int:
        return len(self.index)

    def _stale(self, c: int, why: str) -> DatasetError:
        return DatasetError(
            f"join index {self.index.path} does not fit {self.columns[c].root} any more ({why}); the dataset or "
            f"the metadataset changed since it was prepared: prepare the metadataset again"
        )

    def _column(self, c: int, part: int, offset: int) -> Any:
        """The sample of column ``c`` at split part position ``part``, byte ``offset``."""
        source = self.columns[c]
        parts = self.parts[c]
        if not 0 <= part < len(parts) or parts[part] < 0:
            raise self._stale(c, f"shard position {part} is not read in split {source.split.name!r}")
        s = int(parts[part])
        idx = source._index(s)  # (count + 1,) uint64 offsets of the shard's samples
        local = int(np.searchsorted(idx, offset))
        if not (local < len(idx) - 1 and int(idx[local]) == offset):
            raise self._stale(c, f"no sample starts at byte {offset} of {source.shards[s]}")
        return source._sample(s, local, *source._read_raw(s, local))

    def samples(self, index: int) -> list[Any]:
        """The joined datasets' samples of row ``index`` (``None`` where a secondary has no match)."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} is out of range for {self.name} ({len(self)} samples)")
        row = np.asarray(self.index.table()[index])  # (C, 3): shard position, byte offset, byte size
        out = []
        for c, (part, offset, _) in enumerate(row.tolist()):
            out.append(None if part < 0 and c > 0 else self._column(c, part, offset))
        key = _key(out[0])
        for c, sample in enumerate(out[1:], start=1):
            if sample is not None and _key(sample) != key:
                raise self._stale(c, f"row {index} joins key {_key(sample)!r} to the primary's {key!r}")
        return out

    def read(self, index: int) -> Any:
        samples = self.samples(index)
        if self.names is None:
            return self.joiner(*samples)
        return self.joiner(**dict(zip(self.names, samples)))

    def key(self, index: int) -> str:
        row = np.asarray(self.index.table()[index])
        return _key(self._column(0, int(row[0, 0]), int(row[0, 1])))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "join",
            "name": self.name,
            "size": len(self),
            "columns": [c.describe() for c in self.columns],
            "names": list(self.names) if self.names else None,
            "joiner": self.joiner_name,
            "index": self.index.path.name,
        }


def _key(sample: Any) -> str:
    return sample["__key__"] if isinstance(sample, dict) else sample.__key__
