"""The reel: reel position -> ``(source, sample index)``, a pure function of spec and seed.

This is invariant I1 in code: :meth:`ReelPlan.resolve` reads nothing but the
plan's own fields (sizes, keys, seed, shuffle) and the positions it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .epochs import source_indices
from .rng import name_key


@dataclass(frozen=True, kw_only=True)
class ReelPlan:
    """The order of one source's reel.

    ``epoch_length`` is the length of one pass (what ``repeat=False`` reads).
    """

    size: int
    name: str
    seed: int
    shuffle: bool

    @property
    def epoch_length(self) -> int:
        return self.size

    def resolve(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """positions: int64[k] -> (source ids int32[k], sample indices int64[k])."""
        positions = np.asarray(positions, dtype=np.int64)
        indices = source_indices(
            positions, self.size, seed=self.seed, source_key=name_key(self.name), shuffle=self.shuffle
        )
        return np.zeros(positions.shape, dtype=np.int32), indices
