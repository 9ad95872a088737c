"""A contiguous range of a source, optionally with its own name and shuffle setting.

Used for metadataset ``subset: {range: [a, b]}`` and
``shuffle_over_epochs_multiplier: null``: the reel sees a smaller source; the
mapped range is fixed before any permutation, so the reel stays a pure function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import OptionError
from .base import MappedSource, Source


class SourceView(MappedSource):
    def __init__(
        self,
        base: Source,
        *,
        start: int = 0,
        stop: int | None = None,
        shuffle: bool | None = None,
        name: str | None = None,
    ):
        stop = len(base) if stop is None else stop
        if not 0 <= start < stop <= len(base):
            raise OptionError(
                f"subset [{start}, {stop}) of {base.name} ({len(base)} samples) is empty or out of range; "
                f"choose 0 <= start < stop <= {len(base)}"
            )
        self.base, self.start, self.stop, self.shuffle = base, start, stop, shuffle
        self.name = name if name is not None else base.name

    def __len__(self) -> int:
        return self.stop - self.start

    def _map(self, indices: np.ndarray) -> np.ndarray:
        return self.start + np.asarray(indices, dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "view",
            "name": self.name,
            "base": self.base.describe(),
            "range": [self.start, self.stop],
            "shuffle": self.shuffle,
        }
