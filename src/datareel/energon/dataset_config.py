"""Energon's ``megatron.energon.dataset_config``: ``get_dataset_from_config(path, ...)``, one prepared dataset
as a factory whose ``build()`` gives the facade's ``DatasetSpec`` — unbatched, and with ``training=False``
read in order, every sample once (Energon's val order); with ``training=True`` shuffled and endless.

What ``build()`` returns feeds the dataset-level API (``MapDataset``, ``BatchDataset``, ... in
:mod:`.wrappers`) and ``get_loader`` / ``get_savable_loader``, as Energon's does.
"""

from __future__ import annotations

from typing import Any

from .datasets import EnergonDataset, _check_common, _open
from .multiplier import energon_multiplier
from .spec import DatasetSpec
from .worker import WorkerConfig

__all__ = ["DatasetFactory", "get_dataset_from_config"]


class DatasetFactory:
    """One opened dataset and how to read it (``training``); :meth:`build` makes the spec."""

    __datareel_factory__ = True

    def __init__(
        self,
        path: Any,
        dataset: Any,
        split_part: str,
        training: bool,
        worker_config: WorkerConfig,
        shuffled: bool = True,
    ):
        self.path, self.dataset, self.split_part = path, dataset, split_part
        self.training, self.worker_config, self.shuffled = bool(training), worker_config, bool(shuffled)
        self.narrowed = False  # a subset= view over the split (get_dataset_from_config sets it)

    @property
    def paths(self) -> list[Any]:
        """The dataset's path as Energon's factories give it: ``[EPath(path)]``."""
        from .epathlib import EPath

        return [self.path if isinstance(self.path, EPath) else EPath(self.path)]

    @property
    def _whole(self) -> Any:
        """The dataset a subset narrows (the dataset itself without one)."""
        return self.dataset.base if self.narrowed else self.dataset

    @property
    def subflavors(self) -> dict[str, Any]:
        dataset = self.dataset
        while getattr(dataset, "subflavors", None) is None and getattr(dataset, "base", None) is not None:
            dataset = dataset.base  # a view (a subset, a shuffle multiplier): the subflavors of what it narrows
        return dict(getattr(dataset, "subflavors", None) or {})

    def build(self, worker_rotation_offset: int = 0) -> DatasetSpec:
        """The dataset as a loader reads it (``worker_rotation_offset`` is Energon's per-worker shard
        rotation; datareel's order does not depend on workers, so only ``0`` is taken)."""
        if worker_rotation_offset:
            from ..errors import OptionError

            raise OptionError(
                f"build(worker_rotation_offset={worker_rotation_offset}): datareel's order does not depend on "
                f"workers, so there is nothing to rotate; call build()"
            )
        return EnergonDataset(
            self.path,
            self.split_part,
            self.worker_config,
            None,
            None,
            None,
            repeat=self.training,
            shuffle=self.training and self.shuffled,
            dataset=self.dataset,
            val=not self.training,
        )

    def __len__(self) -> int:
        """The split's samples (as Energon's factories count them: before a subset)."""
        return len(self._whole)

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
    shuffle_over_epochs: int | None = 1,
    subset: Any = None,
    **kwargs: Any,
) -> DatasetFactory:
    """Energon's ``get_dataset_from_config``: the dataset at ``path`` (its ``.nv-meta/dataset_config``,
    default ``dataset.yaml``, and ``split_config``'s ``split_part``, default ``split.yaml`` / ``train``);
    ``sample_type`` must be the dataset's type or a base of it; ``shuffle_over_epochs`` is Energon's
    ``shuffle_over_epochs_multiplier`` (``None``: read in order); ``subset`` a ``DatasetSubset`` (its
    ``absolute_range``, then its ``range`` of what is left, as Energon computes it).  Energon's buffer arguments
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
    shuffle_over_epochs = energon_multiplier(shuffle_over_epochs, "get_dataset_from_config: ", "shuffle_over_epochs")
    if shuffle_over_epochs not in (1, None):
        open_kwargs["shuffle_over_epochs_multiplier"] = shuffle_over_epochs
    part = split_part or "train"
    dataset = _open(path, part, open_kwargs, None, "get_dataset_from_config")
    narrowed = _subset(dataset, subset, path) if subset is not None else dataset
    factory = DatasetFactory(path, narrowed, part, training, worker_config, shuffled=shuffle_over_epochs is not None)
    factory.narrowed = narrowed is not dataset
    return factory


def _subset(dataset: Any, subset: Any, path: Any) -> Any:
    """``dataset`` narrowed to ``subset`` (Energon's ``DatasetSubset.compute_subset``: ``absolute_range``
    first, then ``range`` as shares of what is left, each end rounded down)."""
    from ..errors import OptionError
    from ..sources.base import Source
    from ..sources.view import SourceView

    if not isinstance(dataset, Source):
        raise OptionError(f"get_dataset_from_config({path!s}, subset=): a subset narrows one dataset, not a blend")
    absolute, shares = getattr(subset, "absolute_range", None), getattr(subset, "range", None)
    total = len(dataset)
    start, stop = 0, total
    if absolute is not None:
        start, stop = int(absolute[0]), total if absolute[1] is None else int(absolute[1])
        if not 0 <= start <= stop <= total:
            raise OptionError(
                f"get_dataset_from_config({path!s}): subset absolute_range {tuple(absolute)} must lie within the "
                f"{total} samples of the split (0 <= start <= end <= {total})"
            )
    if shares is not None:
        left = stop - start
        start, stop = start + int(left * shares[0]), start + int(left * shares[1])
    if (start, stop) == (0, total):
        return dataset
    return SourceView(dataset, start=start, stop=stop)
