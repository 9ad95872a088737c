"""Energon's ``BlendDataset``: each batch drawn from one of several separately batched datasets, by weight --
elastic in the facade.

Energon draws the dataset of each batch with a random generator per worker.  The facade draws the dataset of
each *unit* (one global batch of a child) with a keyed function of the unit's index and the seed
(:mod:`datareel.plan.batch_blend`: exact shares per block), the same on every rank, so each child's own loader
advances in lockstep on all ranks and the blend's state (the unit index and each child's state) restores on any
topology the children accept (:mod:`datareel.energon.batch_blend`).
"""

from __future__ import annotations

from typing import Any

from ..batch_blend_spec import BatchBlendSpec


class BlendDataset(BatchBlendSpec):
    """``BlendDataset((get_train_dataset(..., batch_size=10), 2), (get_train_dataset(..., batch_size=20), 8),
    worker_config=...)``: batches of the first dataset 20% of the time, of the second 80%; each batch is one
    dataset's, made by its own task encoder.  Load it with ``get_loader`` / ``get_savable_loader``."""

    kind = "BlendDataset"

    def __init__(self, *dataset_weights: Any, worker_config: Any):
        super().__init__(dataset_weights, worker_config)
