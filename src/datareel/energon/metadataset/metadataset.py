"""Energon's ``megatron.energon.metadataset.metadataset``: ``Metadataset``, the legacy (v1) metadataset —
``splits: {name: {datasets: [{weight, path, subflavor, subflavors, ...}]}}``, Energon's default type for a
file without ``__class__`` — read as a weighted blend per split (its ``subflavor`` is
``subflavors.__subflavor__``).  It lives beside :class:`~.metadataset_v2.MetadatasetV2`, which loads either
kind (a metadataset names nested ones of both)."""

from .metadataset_v2 import Metadataset

__all__ = ["Metadataset"]
