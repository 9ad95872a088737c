"""Energon's ``megatron.energon.savable_loader``: ``SavableDataLoader`` / ``BasicDataLoader`` by their names,
the facade loader made as ``get_savable_loader`` / ``get_loader`` make it."""

from __future__ import annotations

from typing import Any

from .datasets import _loader
from .loader import EnergonLoader

__all__ = ["BasicDataLoader", "SavableDataLoader"]


class SavableDataLoader(EnergonLoader):
    """``SavableDataLoader(dataset, worker_config=..., ...)``: what ``get_savable_loader`` returns."""

    def __init__(self, dataset: Any, *, worker_config: Any = None, prefetch_factor: int | None = 2, **kwargs: Any):
        made = _loader(dataset, worker_config, prefetch_factor, True, kwargs, type(self).__name__, self._gc_every)
        self.__dict__.update(made.__dict__)

    _gc_every = 0


class BasicDataLoader(SavableDataLoader):
    """``BasicDataLoader(dataset, ...)``: what ``get_loader`` returns (a ``gc.collect()`` every 10 batches)."""

    _gc_every = 10
