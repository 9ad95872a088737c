"""Energon's ``megatron.energon.metadataset.dataset_loader``: ``DatasetLoader``, one prepared dataset (a
WebDataset directory or a ``.jsonl``) as a loader: ``get_dataset`` is
:func:`datareel.energon.dataset_config.get_dataset_from_config` with this reference's split part,
subflavors and configs; ``get_datasets`` wraps it as the one leaf of a :class:`LoadedDatasetList`."""

from __future__ import annotations

from typing import Any

from ...errors import OptionError
from .loader_interface import DatasetBlendMode, DatasetLoaderInterface, LoadedDataset, LoadedDatasetList

__all__ = ["DatasetLoader"]


class DatasetLoader(DatasetLoaderInterface):
    """A dataset by path, with Energon's fields (``split_part``, ``subflavors``,
    ``shuffle_over_epochs_multiplier``, ``dataset_config``, ``split_config``)."""

    def __init__(
        self,
        path: Any,
        split_part: str | None = None,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        dataset_config: str | None = None,
        split_config: str | None = None,
    ):
        self.path, self.split_part, self.subflavors = path, split_part, subflavors
        self.shuffle_over_epochs_multiplier = shuffle_over_epochs_multiplier
        self.dataset_config, self.split_config = dataset_config, split_config

    def post_initialize(self, mds_path: Any = None) -> None:
        pass

    def get_dataset(
        self,
        *,
        training: bool,
        split_part: str | None = None,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs: int | None = 1,
        split_config: str | None = None,
        dataset_config: str | None = None,
        subset: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The dataset factory of this path (``subflavors`` given here override this reference's own)."""
        from ..dataset_config import get_dataset_from_config

        part = self.split_part if self.split_part is not None else split_part
        if part is None:
            raise OptionError(f"DatasetLoader({self.path!s}).get_dataset: give split_part (the reference has none)")
        if self.subflavors is not None:
            subflavors = {**self.subflavors, **(subflavors or {})}
        extra = dict(kwargs)
        if shuffle_over_epochs != 1:  # passed only where it is not the default
            extra["shuffle_over_epochs"] = shuffle_over_epochs
        if subset is not None:
            extra["subset"] = subset
        return get_dataset_from_config(
            self.path,
            training=training,
            split_part=part,
            worker_config=worker_config,
            subflavors=subflavors,
            dataset_config=dataset_config if dataset_config is not None else self.dataset_config,
            split_config=split_config if split_config is not None else self.split_config,
            **extra,
        )

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
    ) -> LoadedDatasetList:
        dataset = self.get_dataset(
            training=training,
            split_part=split_part,
            worker_config=worker_config,
            subflavors=subflavors,
            shuffle_over_epochs=shuffle_over_epochs_multiplier,
            subset=subset,
            **kwargs,
        )
        return LoadedDatasetList(blend_mode=DatasetBlendMode.NONE, datasets=[LoadedDataset(dataset=dataset)])

    def __repr__(self) -> str:
        return f"DatasetLoader({self.path!s}, split_part={self.split_part!r})"
