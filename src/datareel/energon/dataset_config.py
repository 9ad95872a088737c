"""Energon's ``megatron.energon.dataset_config``: ``get_dataset_from_config(path, ...)``, one prepared dataset
as a factory whose ``build()`` gives the facade's ``DatasetSpec`` — unbatched, and with ``training=False``
read in order, every sample once (Energon's val order); with ``training=True`` shuffled and endless.

What ``build()`` returns feeds the dataset-level API (``MapDataset``, ``BatchDataset``, ... in
:mod:`.wrappers`) and ``get_loader`` / ``get_savable_loader``, as Energon's does.
"""

from __future__ import annotations

from typing import Any

from .datasets import _check_common, _open
from .spec import DatasetSpec
from .worker import WorkerConfig

__all__ = ["DatasetFactory", "get_dataset_from_config"]


class DatasetFactory:
    """One opened dataset and how to read it (``training``); :meth:`build` makes the spec."""

    __datareel_factory__ = True

    def __init__(self, path: Any, dataset: Any, split_part: str, training: bool, worker_config: WorkerConfig):
        self.path, self.dataset, self.split_part = path, dataset, split_part
        self.training, self.worker_config = bool(training), worker_config

    @property
    def subflavors(self) -> dict[str, Any]:
        return dict(getattr(self.dataset, "subflavors", None) or {})

    def build(self, worker_rotation_offset: int = 0) -> DatasetSpec:
        """The dataset as a loader reads it (``worker_rotation_offset`` is Energon's per-worker shard
        rotation; datareel's order does not depend on workers, so only ``0`` is taken)."""
        if worker_rotation_offset:
            from ..errors import OptionError

            raise OptionError(
                f"build(worker_rotation_offset={worker_rotation_offset}): datareel's order does not depend on "
                f"workers, so there is nothing to rotate; call build()"
            )
        return DatasetSpec(
            self.path,
            self.split_part,
            self.worker_config,
            None,
            None,
            None,
            repeat=self.training,
            shuffle=self.training,
            dataset=self.dataset,
            val=not self.training,
        )

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"DatasetFactory({self.path!s}, split_part={self.split_part!r}, training={self.training})"


def get_dataset_from_config(
    path: Any,
    *,
    dataset_config: str | None = None,
    split_config: str | None = None,
    split_part: str | None = None,
    training: bool = True,
    subflavors: dict[str, Any] | None = None,
    worker_config: WorkerConfig,
    sample_type: Any = None,
    **kwargs: Any,
) -> DatasetFactory:
    """Energon's ``get_dataset_from_config``: the dataset at ``path`` (its ``.nv-meta/dataset_config``,
    default ``dataset.yaml``, and ``split_config``'s ``split_part``, default ``split.yaml`` / ``train``);
    ``sample_type`` must be the dataset's type or a base of it.  Energon's buffer arguments
    (``shuffle_buffer_size``, ``max_samples_per_sequence``, ...) are accepted and not needed; others
    ``get_train_dataset`` does not know are refused by name."""
    given = {"dataset_config": dataset_config, "split_config": split_config, "subflavors": subflavors}
    kwargs = {**kwargs, **{k: v for k, v in given.items() if v is not None}}
    if sample_type is not None:
        kwargs["sample_type"] = sample_type
    open_kwargs = _check_common(kwargs, "get_dataset_from_config")
    if open_kwargs.pop("handler", None) is not None:
        from ..errors import OptionError

        raise OptionError("get_dataset_from_config: give handler= to BatchDataset or get_train_dataset")
    part = split_part or "train"
    dataset = _open(path, part, open_kwargs, None, "get_dataset_from_config")
    return DatasetFactory(path, dataset, part, training, worker_config)
