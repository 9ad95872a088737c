"""Energon's ``megatron.energon.metadataset.loader``: ``load_dataset`` (a metadataset or one prepared dataset
as a :class:`~.loader_interface.DatasetLoaderInterface`), ``traverse_metadataset`` (a split's leaf
references, nothing opened) and ``prepare_metadataset`` (what a metadataset needs on disk: the index of
each join).  Files are read with datareel's safe YAML reader: no class a metadataset
names is imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import DatasetError, OptionError
from ...formats import METADATASET
from ...storage.path import as_path
from ..epathlib import EPath
from .dataset_loader import DatasetLoader
from .loader_interface import DatasetLoaderInterface, TraversedDatasetReference
from .metadataset_v2 import load_metadataset_file as load_metadataset_file
from .metadataset_v2 import metadataset_of

__all__ = ["load_dataset", "load_metadataset_file", "prepare_metadataset", "traverse_metadataset"]


def load_dataset(path: Any, **kwargs: Any) -> DatasetLoaderInterface:
    """A metadataset (``.yaml``) or a prepared dataset (directory, ``.jsonl``) as a loader, checked;
    ``kwargs`` are a dataset's own fields (``split_part``, ``subflavors``, ...); a dict is a metadataset's
    parsed document."""
    if isinstance(path, dict):
        if kwargs:
            raise OptionError(f"load_dataset(dict, ...): a metadataset takes no extra arguments, got {sorted(kwargs)}")
        loaded = metadataset_of(path, EPath("/dict"))
    elif METADATASET.detect(as_path(str(path))):
        if kwargs:
            raise OptionError(f"load_dataset({path!s}): a metadataset takes no extra arguments, got {sorted(kwargs)}")
        loaded = load_metadataset_file(path)
    else:
        loaded = DatasetLoader(path=EPath(path), **kwargs)
    loaded.post_initialize()
    return loaded


def traverse_metadataset(path: str | Path | Any, *, split_part: str, **kwargs: Any) -> list[TraversedDatasetReference]:
    """The leaf dataset references of ``split_part`` of the metadataset at ``path``, nested metadatasets
    followed; paths resolved, nothing opened (a missing dataset is listed as it is)."""
    if kwargs:
        raise OptionError(f"traverse_metadataset: a metadataset takes no extra arguments, got {sorted(kwargs)}")
    if not METADATASET.detect(as_path(str(path))):
        raise DatasetError(f"traverse_metadataset takes a metadataset (.yaml), got {path!s}")
    return load_metadataset_file(path).traverse(split_part=split_part)


def prepare_metadataset(path: Any) -> None:
    """Write what the metadataset at ``path`` needs on disk: the index of each join (``<file>.cache/``,
    Energon's file and name); its datasets are checked to exist.  Joiners are not resolved here (Energon
    mocks them), so a joiner naming a module that is not importable does not stop preparing."""
    loaded = load_metadataset_file(path)
    loaded.post_initialize()
    loaded.prepare()
