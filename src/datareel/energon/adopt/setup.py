"""What adopting a megatron.energon job must know of the old job's configuration (the new job's options say it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Setup:
    """The configuration the old job ran with, as the new job's options give it."""

    sizes: tuple[int, ...]
    shard_counts: tuple[np.ndarray, ...]
    blend: bool
    shuffle_buffer_size: int | None
    max_samples_per_sequence: int | None
    parallel_shard_iters: int | None
    over_epochs: tuple[int | None, ...]
    """Per dataset: 1 (each epoch its own shuffle) or ``None`` (read in order)."""
    epoch_length: int
    seed_offset: int | None = None
    """The old job's ``WorkerConfig.seed_offset`` (its workers' generators are seeded with it), if known."""
