"""Energon's ``BaseWebdatasetFactory``: the base of the WebDataset dataset factories, and the home of
``BaseWebdatasetFactory.prepare_dataset`` (datareel's writer, :mod:`.prepare`)."""

from __future__ import annotations

from typing import Any


class BaseWebdatasetFactory:
    """Energon's base WebDataset factory (datareel builds datasets with :mod:`datareel.energon.dataset_config`)."""

    @classmethod
    def prepare_dataset(cls, parent_path: Any, paths: Any, **kwargs: Any) -> Any:
        """Energon's ``prepare_dataset``: index the shards, write ``.nv-meta`` (:func:`.prepare.prepare_dataset`)."""
        from .prepare import prepare_dataset

        return prepare_dataset(parent_path, paths, **kwargs)
