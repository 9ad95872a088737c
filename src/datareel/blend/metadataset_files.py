"""A metadataset's files as the builder (:mod:`.metadataset`) reads them: each YAML read once, its top level checked,
a split's node found (the legacy v1 form turned into a ``blend``), and the whole tree counted before anything is
built, so a tree too large (:data:`~datareel.formats.metafiles.MAX_NODES`) is refused at once.  A mixin: the
builder holds ``files`` (path -> parsed document)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..formats import METADATASET
from ..formats.metafiles import MAX_NODES, check_keys, load_file
from .metadataset_rules import ROOT_KEYS, beside


class MetadatasetFiles:
    """Reading and counting metadataset files (see the module docstring)."""

    files: dict[Path, Any]

    def split_node(self, path: Path, split: str) -> Any:
        """The node of ``split`` in the metadataset at ``path`` (each file is read once per builder)."""
        if path not in self.files:
            self.files[path] = load_file(path, "metadataset", fix="fix the metadataset YAML")
        config = self.files[path]
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
        splits = config.get("splits")
        if cls not in ("MetadatasetV2", "Metadataset") or not isinstance(splits, dict):
            raise DatasetError(
                f"{path}: expected __class__: MetadatasetV2 (or the legacy Metadataset) with a 'splits' mapping, "
                f"got __class__={cls!r:.80} and splits={splits!r:.80}"
            )
        if split not in splits:
            raise DatasetError(f"{path}: split {split!r} is not defined; it defines {sorted(map(str, splits))}")
        node = splits[split]
        if cls == "Metadataset":  # legacy v1: {datasets: [{weight, path, ...}]}
            if not isinstance(node, dict) or not isinstance(node.get("datasets"), list):
                raise DatasetError(
                    f"{path}: legacy split {split!r} needs a 'datasets' list"
                    + (
                        ""
                        if "__class__" in config
                        else " (a metadataset without __class__ is Energon's legacy "
                        "Metadataset; write __class__: MetadatasetV2 for blend, blend_epochized and join)"
                    )
                )
            check_keys(node, ("datasets",), f"{path}: splits.{split}", "a legacy (Metadataset) split")
            node = {"blend": [legacy_entry(item) for item in node["datasets"]]}
        return node

    def count(self, path: Path, split: str, stack: tuple[Path, ...], memo: dict[tuple[Path, str], int]) -> int:
        """Blends and datasets the tree of ``split`` in ``path`` holds, includes expanded (memoised per
        file and split, so a file included many times is read once); raises past :data:`MAX_NODES`.
        Malformed entries count as one: :meth:`node` names them when it gets there."""
        if (path, split) in memo or path in stack:
            return memo.get((path, split), 1)  # a cycle is named by metadataset()

        def walk(node: Any, split: str) -> int:
            if not isinstance(node, dict):
                return 1
            if isinstance(node.get("path"), str) and METADATASET.detect(Path(node["path"])):
                target = beside(path, node["path"]).resolve()
                inner = node.get("split_part", split)
                return 1 + (self.count(target, inner, stack + (path,), memo) if isinstance(inner, str) else 0)
            items = node.get("blend", node.get("blend_epochized"))
            return 1 + (sum(walk(item, split) for item in items) if isinstance(items, list) else 0)

        try:
            node = self.split_node(path, split)
        except DatasetError:
            return 1  # named when the builder reaches it
        memo[(path, split)] = total = walk(node, split)
        if total > MAX_NODES:
            raise DatasetError(
                f"{path}: split {split!r} (with the metadatasets it includes) describes {total:,} blends and "
                f"datasets, more than {MAX_NODES:,}; a metadataset that includes another many times multiplies "
                f"its entries. Reference each dataset once, with its weight or repetitions"
            )
        return total


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
