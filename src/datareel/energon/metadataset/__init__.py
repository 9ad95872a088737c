"""Energon's ``megatron.energon.metadataset``: loading, traversing and preparing (meta)datasets by Energon's
names, over datareel's own reading of the same files (:mod:`datareel.blend.metadataset` builds the reel)."""

from .dataset_loader import DatasetLoader
from .loader import load_dataset, prepare_metadataset, traverse_metadataset
from .loader_interface import DatasetBlendMode, DatasetLoaderInterface
from .metadataset import Metadataset
from .metadataset_v2 import MetadatasetV2

__all__ = [
    "DatasetBlendMode",
    "DatasetLoader",
    "DatasetLoaderInterface",
    "Metadataset",
    "MetadatasetV2",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
]
