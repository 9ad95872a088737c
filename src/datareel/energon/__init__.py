"""Energon drop-in: Megatron-Energon's loader API on top of datareel.

Change ``from megatron.energon import ...`` to ``from datareel.energon import ...``
and a training script keeps its calls — ``WorkerConfig``, ``get_train_dataset``,
``get_val_dataset``, ``get_savable_loader``, ``get_loader`` and the loader's
``save_state_rank`` / ``restore_state_rank`` / ``save_state_global`` /
``restore_state_global`` — and gains elastic resumption: pass
``global_batch_size=`` to ``get_train_dataset`` and the saved state restores on
any world size and worker count.  See ``docs/migrating-from-energon.md``.
"""

from ..execute.encoder import DefaultTaskEncoder
from .datasets import (
    LimitDataset,
    RepeatDataset,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    get_val_datasets,
)
from .loader import EnergonLoader

__all__ = [
    "DefaultTaskEncoder",
    "EnergonLoader",
    "LimitDataset",
    "RepeatDataset",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
]
