"""A contiguous range of a source, optionally with its own name and shuffle setting.

Used for metadataset ``subset: {range: [a, b]}`` and ``shuffle_over_epochs_multiplier``
(``null``: no shuffle; ``k >= 2`` or ``-1``: ``over_epochs``, see :mod:`datareel.plan.over_epochs`):
the reel sees a smaller source; the mapped range is fixed before any permutation, so the reel stays
a pure function.
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
        over_epochs: int = 1,
    ):
        stop = len(base) if stop is None else stop
        if not 0 <= start < stop <= len(base):
            raise OptionError(
                f"subset [{start}, {stop}) of {base.name} ({len(base)} samples) is empty or out of range; "
                f"choose 0 <= start < stop <= {len(base)}"
            )
        if (
            isinstance(over_epochs, bool)
            or not isinstance(over_epochs, int)
            or not (over_epochs == -1 or over_epochs >= 1)
        ):
            raise OptionError(
                f"over_epochs={over_epochs!r} of {base.name}: give 1 (shuffle each epoch), k >= 2 (each sample k "
                f"times in k epochs) or -1 (draw with replacement)"
            )
        self.base, self.start, self.stop, self.shuffle = base, start, stop, shuffle
        self.over_epochs = over_epochs
        self.name = name if name is not None else base.name

    def __len__(self) -> int:
        return self.stop - self.start

    def _map(self, indices: np.ndarray) -> np.ndarray:
        return self.start + np.asarray(indices, dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        out = {
            "kind": "view",
            "name": self.name,
            "base": self.base.describe(),
            "range": [self.start, self.stop],
            "shuffle": self.shuffle,
        }
        if self.over_epochs != 1:  # absent at 1: the spec digests of existing views stay as they were
            out["over_epochs"] = self.over_epochs
        return out
