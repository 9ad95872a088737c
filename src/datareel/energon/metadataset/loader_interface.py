"""Energon's ``megatron.energon.metadataset.loader_interface``: what a (meta)dataset loader gives —
``DatasetBlendMode``, ``LoadedDataset`` / ``LoadedDatasetList`` (the flattened leaves of a split with
their absolute weights or repetitions) and ``TraversedDatasetReference`` — and the
``DatasetLoaderInterface`` every loader here implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "DatasetBlendMode",
    "DatasetLoaderInterface",
    "LoadedDataset",
    "LoadedDatasetList",
    "TraversedDatasetReference",
]


class DatasetBlendMode(Enum):
    """How a split's datasets combine: not at all (one dataset), by sampling weight, or by repetitions of
    their samples per epoch."""

    NONE = "none"
    DATASET_WEIGHT = "dataset_weight"
    SAMPLE_REPETITIONS = "sample_repetitions"


@dataclass
class LoadedDataset:
    """One leaf: its dataset factory, its absolute weight or repetitions, and its aux file stores."""

    dataset: Any
    weight: float | int | None = None
    repetitions: float | int | None = None
    aux: dict[str, Any] | None = None


@dataclass
class LoadedDatasetList:
    """The leaves of one split, flattened, and how they blend."""

    datasets: list[LoadedDataset] = field(default_factory=list)
    blend_mode: DatasetBlendMode = DatasetBlendMode.NONE


@dataclass
class TraversedDatasetReference:
    """A leaf reached by :func:`~.loader.traverse_metadataset`: its path, split part, aux paths and the
    subflavors the metadataset hierarchy gives it (not those of the dataset's own ``dataset.yaml``)."""

    path: Any
    split_part: str
    aux: dict[str, Any]
    subflavors: dict[str, Any]


class DatasetLoaderInterface(ABC):
    """A (meta)dataset: ``post_initialize`` checks it, ``traverse`` lists its leaves, ``get_datasets`` loads
    them (keyword arguments as Energon's), ``prepare`` writes what it needs on disk."""

    @abstractmethod
    def post_initialize(self, mds_path: Any = None) -> None: ...

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        raise NotImplementedError(f"{type(self).__name__} does not implement traverse()")

    @abstractmethod
    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        subset: Any = None,
        **kwargs: Any,
    ) -> LoadedDatasetList: ...

    def prepare(self, split_part: str | None = None) -> tuple[Any, ...]:
        return ()
