"""A metadataset file's top level, as every reader takes it: the document checked (:func:`checked`: Energon's
classes only, never a module the file names) and a legacy (``Metadataset``, v1) split read as the ``blend`` it
means (:func:`legacy_split`)."""

from __future__ import annotations

from typing import Any

from ...errors import DatasetError
from ..metafiles import check_keys

ROOT_KEYS = ("__module__", "__class__", "splits")
"""Keys of the top level of a metadataset."""


def checked(config: Any, path: Any) -> dict[str, Any]:
    """A metadataset's parsed document ``config`` (read from ``path``), its top level checked."""
    if not isinstance(config, dict):
        raise DatasetError(f"{path}: a metadataset is a mapping with '__class__' and 'splits', got {config!r:.80}")
    check_keys(config, ROOT_KEYS, f"{path}: the top level", "a metadataset")
    module = config.get("__module__", "megatron.energon")
    if not (isinstance(module, str) and (module == "megatron.energon" or module.startswith("megatron.energon."))):
        raise DatasetError(
            f"{path}: __module__={module!r:.80} is not megatron.energon; datareel reads Energon's metadatasets "
            f"only (it never imports a module a metadataset names): write __module__: megatron.energon"
        )
    cls = config.get("__class__", "Metadataset")  # Energon's default type: the legacy Metadataset
    if cls not in ("MetadatasetV2", "Metadataset") or not isinstance(config.get("splits"), dict):
        raise DatasetError(
            f"{path}: expected __class__: MetadatasetV2 (or the legacy Metadataset) with a 'splits' mapping, "
            f"got __class__={cls!r:.80} and splits={config.get('splits')!r:.80}"
        )
    return config


def legacy_split(node: Any, path: Any, split: str, *, implicit: bool) -> dict[str, Any]:
    """A legacy (``Metadataset``) split ``{datasets: [...]}`` as the ``blend`` it means."""
    if not isinstance(node, dict) or not isinstance(node.get("datasets"), list):
        raise DatasetError(
            f"{path}: legacy split {split!r} needs a 'datasets' list"
            + (
                " (a metadataset without __class__ is Energon's legacy Metadataset; write __class__: MetadatasetV2 "
                "for blend, blend_epochized and join)"
                if implicit
                else ""
            )
        )
    check_keys(node, ("datasets",), f"{path}: splits.{split}", "a legacy (Metadataset) split")
    return {"blend": [legacy_entry(item) for item in node["datasets"]]}


def legacy_entry(item: Any) -> Any:
    """A legacy (v1) dataset entry with its ``subflavor: X`` as ``subflavors: {__subflavor__: X}`` (Energon's
    v1 reading: an ``__subflavor__`` already in ``subflavors`` wins)."""
    if not isinstance(item, dict) or "subflavor" not in item:
        return item
    out = {k: v for k, v in item.items() if k != "subflavor"}
    subflavors = out.get("subflavors")
    if subflavors is None or isinstance(subflavors, dict):
        out["subflavors"] = {"__subflavor__": item["subflavor"], **(subflavors or {})}
    return out
