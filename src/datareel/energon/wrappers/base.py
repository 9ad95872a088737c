"""The dataset-level API's common ground: what ``MapDataset`` / ``BatchDataset`` compile to (a
:class:`Composed` task encoder on the facade's ``DatasetSpec``), and :func:`as_spec`, which turns what a
loader call is given into the spec it runs.

Energon chains dataset objects (``MapDataset(BatchDataset(ds, ...), fn)``) that iterate each other in
every worker.  The facade keeps one spec per loader: a wrapper adds its function to the spec's task
encoder — a sample map after ``encode_sample``, the batcher as ``batch``, a batch map after
``encode_batch`` — so the loader's order stays datareel's reel (elastic, restorable) and the functions
run in the workers on each micro-batch, as Energon's do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import OptionError
from ..spec import DatasetSpec


class Composed:
    """A task encoder: ``inner``'s hooks (Energon's defaults when ``None``), then the wrappers' functions."""

    def __init__(
        self, inner: Any, sample_maps: tuple[Any, ...] = (), batcher: Any = None, batch_maps: tuple[Any, ...] = ()
    ):
        from ..task_encoder.base import DefaultTaskEncoder

        self._task_encoder = inner if inner is not None else DefaultTaskEncoder()
        self.sample_maps, self.batcher, self.batch_maps = tuple(sample_maps), batcher, tuple(batch_maps)

    @property
    def cookers(self) -> Any:
        return getattr(self._task_encoder, "cookers", ())

    def encode_sample(self, sample: Any) -> Any:
        sample = self._task_encoder.encode_sample(sample)
        for fn in self.sample_maps:
            sample = fn(sample)
        return sample

    def batch(self, samples: list[Any]) -> Any:
        return self.batcher(samples) if self.batcher is not None else self._task_encoder.batch(samples)

    def encode_batch(self, batch: Any) -> Any:
        if self.batcher is None:
            batch = self._task_encoder.encode_batch(batch)
        for fn in self.batch_maps:
            batch = fn(batch)
        return batch

    def with_(self, **changes: Any) -> Composed:
        out = Composed(self._task_encoder, self.sample_maps, self.batcher, self.batch_maps)
        for name, value in changes.items():
            setattr(out, name, value)
        return out


def composed(spec: DatasetSpec) -> Composed:
    """The spec's task encoder as a :class:`Composed` (wrapping the given one)."""
    encoder = spec.task_encoder
    return encoder if isinstance(encoder, Composed) else Composed(encoder)


def spec_of(dataset: Any, where: str) -> DatasetSpec:
    """What a wrapper wraps: a facade spec (a ``get_dataset_from_config`` factory is built first)."""
    build = getattr(dataset, "build", None)
    if not isinstance(dataset, DatasetSpec) and callable(build) and hasattr(dataset, "__datareel_factory__"):
        dataset = build()
    if not isinstance(dataset, DatasetSpec):
        raise OptionError(
            f"{where} wraps what datareel.energon's get_train_dataset / get_val_dataset / "
            f"get_dataset_from_config(...).build() or another wrapper returns, got {type(dataset).__name__} "
            f"(a dataset built by megatron.energon cannot be loaded here)"
        )
    return dataset


def as_spec(dataset: Any, options: Any, where: str) -> tuple[DatasetSpec, Any]:
    """-> (the spec a loader runs, or a ``BlendDataset`` / ``MixBatchDataset``, and its options): a
    ``WatchdogDataset`` gives its timeouts to the options."""
    from .watchdog_dataset import WatchdogDataset

    if isinstance(dataset, WatchdogDataset):
        options = replace(
            options,
            watchdog_timeout_seconds=dataset.timeout_seconds,
            watchdog_initial_timeout_seconds=dataset.initial_timeout_seconds,
            fail_on_timeout=dataset.fail_on_timeout,
        )
        dataset = dataset.dataset
    from ..batch_blend_spec import BatchBlendSpec  # a batch-granular blend: its own loader (..batch_blend)

    return (dataset if isinstance(dataset, BatchBlendSpec) else spec_of(dataset, where)), options
