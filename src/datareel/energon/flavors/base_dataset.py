"""Energon's ``megatron.energon.flavors.base_dataset``: ``Sample``, and the two base classes user code names in
annotations and ``isinstance`` checks — ``SavableDataset`` (what a loader reads: the facade's
:class:`~datareel.energon.spec.DatasetSpec`) and ``BaseCoreDatasetFactory`` (what
``get_dataset_from_config`` returns: :class:`~datareel.energon.dataset_config.DatasetFactory`).

Both are abstract: datareel's classes are registered as their virtual subclasses, so ``isinstance`` answers
as it does with Energon, and nothing here holds iteration state (a datareel dataset is a recipe; the
loader's cursor is the only state).
"""

from __future__ import annotations

import abc

from ...sources.typed import Sample
from ..dataset_config import DatasetFactory
from ..spec import DatasetSpec

__all__ = ["BaseCoreDatasetFactory", "Sample", "SavableDataset"]


class SavableDataset(abc.ABC):  # noqa: B024 (no abstract method: a name for isinstance and annotations)
    """What ``get_train_dataset`` / ``get_val_dataset`` / ``build()`` return and ``get_loader`` reads."""


class BaseCoreDatasetFactory(abc.ABC):  # noqa: B024
    """What ``get_dataset_from_config`` returns; ``build()`` makes a :class:`SavableDataset`."""


SavableDataset.register(DatasetSpec)
BaseCoreDatasetFactory.register(DatasetFactory)
