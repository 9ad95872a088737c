"""Energon's ``megatron.energon.metadataset.metadataset``: ``Metadataset``, the legacy (v1) metadataset —
``splits: {name: {datasets: [{weight, path, subflavor, subflavors, ...}]}}``, Energon's default type for a
file without ``__class__`` — read as a weighted blend per split (its ``subflavor`` is
``subflavors.__subflavor__``)."""

from __future__ import annotations

from typing import Any

from ...blend.metadataset import _legacy_entry as legacy_entry
from ...errors import DatasetError
from .metadataset_v2 import MetadatasetV2

__all__ = ["Metadataset"]


class Metadataset(MetadatasetV2):
    """A legacy metadataset at ``path``: each split a ``datasets`` list blended by ``weight``."""

    version = 1

    def __init__(self, path: Any, splits: dict[str, Any]):
        converted = {}
        for name, node in splits.items():
            if not isinstance(node, dict) or not isinstance(node.get("datasets"), list) or set(node) != {"datasets"}:
                raise DatasetError(
                    f"{path}: legacy (Metadataset) split {name!r} must be {{datasets: [...]}}, got {node!r:.80}; a "
                    f"file without __class__ is a legacy Metadataset (write __class__: MetadatasetV2 for blend, "
                    f"blend_epochized and join)"
                )
            converted[name] = {"blend": [legacy_entry(item) for item in node["datasets"]]}
        super().__init__(path, converted)
