"""Energon's ``BlendDataset``: refused, naming why (batches of separately batched datasets, drawn at random).

Energon draws each *batch* from one of its datasets, each batched on its own (even with different batch
sizes), by a random generator per worker.  A datareel global batch is ``G`` samples of one reel at fixed
positions, which is what lets a checkpoint restore on any world size: a reel of whole batches of varying
sizes has no such positions.  Blend the datasets before batching, elastically: a metadataset with
``blend`` weights, or ``datareel.mix``, read by one ``get_train_dataset``.
"""

from __future__ import annotations

from typing import Any

from ...errors import OptionError


class BlendDataset:
    """Refused: see the module docstring."""

    def __init__(self, *dataset_weights: Any, worker_config: Any = None):
        sizes = sorted({getattr(d, "batch_size", None) for d, *_ in dataset_weights}, key=str)
        raise OptionError(
            f"BlendDataset blends whole batches of {len(dataset_weights)} separately batched datasets (batch sizes "
            f"{sizes}) at random per worker, so its batches have no fixed reel positions and a checkpoint could not "
            f"restore on another topology (datareel's elastic guarantee). Blend the samples before batching: a "
            f"metadataset with blend weights, or datareel.mix([(dataset, weight), ...]), in one get_train_dataset"
        )
