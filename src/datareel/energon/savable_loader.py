"""Energon's ``megatron.energon.savable_loader``: ``SavableDataLoader`` / ``BasicDataLoader`` by their names,
the facade loader made as ``get_savable_loader`` / ``get_loader`` make it."""

from __future__ import annotations

from typing import Any

from .datasets import _loader
from .energon_loader import EnergonLoader

__all__ = ["BasicDataLoader", "SavableDataLoader"]


class SavableDataLoader(EnergonLoader):
    """``SavableDataLoader(dataset, worker_config=..., ...)``: what ``get_savable_loader`` returns."""

    def __new__(cls, dataset: Any = None, **kwargs: Any) -> Any:
        """A ``BlendDataset`` / ``MixBatchDataset`` gets its own loader (:mod:`.batch_blend`), not this class."""
        from .batch_blend_spec import BatchBlendSpec

        if isinstance(dataset, BatchBlendSpec):
            config, prefetch = kwargs.pop("worker_config", None), kwargs.pop("prefetch_factor", 2)
            return _loader(dataset, config, prefetch, True, kwargs, cls.__name__, cls._gc_every)
        return super().__new__(cls)

    def __init__(self, dataset: Any, *, worker_config: Any = None, prefetch_factor: int | None = 2, **kwargs: Any):
        made = _loader(dataset, worker_config, prefetch_factor, True, kwargs, type(self).__name__, self._gc_every)
        self.__dict__.update(made.__dict__)

    _gc_every = 0


class BasicDataLoader(SavableDataLoader):
    """``BasicDataLoader(dataset, ...)``: what ``get_loader`` returns (a ``gc.collect()`` every 10 batches)."""

    _gc_every = 10
