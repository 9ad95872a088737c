"""Energon metadataset YAML (v2, and the legacy v1 list form) -> a datareel blend.

Supported: ``blend`` with ``weight``; ``blend_epochized`` with ``repetitions``;
nested metadatasets; ``path`` relative to the YAML (a prepared directory, a
``.jsonl`` or another metadataset); ``split_part``; ``subflavors`` (outer ones
override inner ones); ``subset: {range: [a, b]}`` with percentages, integers
and ``end`` (absolute ranges only at datasets, applied first; percentages
compose); ``shuffle_over_epochs_multiplier`` 1 and ``null``; ``dataset_config``
and ``split_config``.  Val/test splits concatenate their datasets (weights and
repetitions are ignored there, as in Energon).  Anything else — ``join``,
``aux``, other multipliers, unknown keys — is refused with an error naming the
key: never silently ignored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..sources.base import Source
from ..sources.energon_meta import MAX_NODES, load_file
from ..sources.jsonl import JsonlSource
from ..sources.view import SourceView
from ..sources.webdataset import WebDatasetSource
from ..storage import join
from ..storage.path import as_path
from .tree import Blend, Concat, EpochizedMix, Mix, concat, mix, mix_epochized

_REF_KEYS = {
    "path",
    "split_part",
    "subflavors",
    "shuffle_over_epochs_multiplier",
    "subset",
    "dataset_config",
    "split_config",
    "weight",
    "repetitions",
}
_UNSUPPORTED = {
    "join": "joining datasets sample by sample",
    "joiner": "joining datasets sample by sample",
    "aux": "auxiliary data sources",
    "nonmatch": "join non-match policies",
    "sample_loader": "Python sample loaders from the dataset",
}


class _Context:
    """What flows down the tree: split, subflavors, shuffle multiplier, relative subsets."""

    def __init__(self, split: str, subflavors: dict, multiplier: Any, ranges: tuple):
        self.split, self.subflavors, self.multiplier, self.ranges = split, subflavors, multiplier, ranges


def load_metadataset(
    path: str | Path, *, split: str = "train", image_decode: str | None = "torchrgb", decode: bool | str = True
) -> Source | Blend:
    """Open ``split`` of a metadataset YAML as a datareel dataset (see the module doc)."""
    builder = _Builder(image_decode=image_decode, decode=decode)
    dataset = builder.metadataset(as_path(path), _Context(split, {}, 1, ()), stack=())
    return dataset


class _Builder:
    def __init__(self, *, image_decode: str | None, decode: bool | str):
        self.image_decode, self.decode = image_decode, decode
        self.names: dict[str, int] = {}
        self.files: dict[Path, Any] = {}  # metadataset path -> its parsed document

    def metadataset(self, path: Path, ctx: _Context, stack: tuple[Path, ...]) -> Source | Blend:
        path = path.resolve()
        if path in stack:
            raise DatasetError(f"{path}: metadatasets include each other in a cycle: {[str(p) for p in stack]}")
        node = self.split_node(path, ctx.split)
        if not stack:  # the top file: refuse a tree too large to build before building any of it
            self.count(path, ctx.split, (), {})
        return self.node(node, path, ctx, stack + (path,), f"splits.{ctx.split}")

    def split_node(self, path: Path, split: str) -> Any:
        """The node of ``split`` in the metadataset at ``path`` (each file is read once per builder)."""
        if path not in self.files:
            self.files[path] = load_file(path, "metadataset")
        config = self.files[path]
        if not isinstance(config, dict):
            raise DatasetError(f"{path}: a metadataset is a mapping with '__class__' and 'splits'")
        cls = config.get("__class__")
        splits = config.get("splits")
        if cls not in ("MetadatasetV2", "Metadataset") or not isinstance(splits, dict):
            raise DatasetError(
                f"{path}: expected __class__: MetadatasetV2 (or the legacy Metadataset) with a 'splits' mapping, "
                f"got __class__={cls!r}"
            )
        if split not in splits:
            raise DatasetError(f"{path}: split {split!r} is not defined; it defines {sorted(map(str, splits))}")
        node = splits[split]
        if cls == "Metadataset":  # legacy v1: {datasets: [{weight, path, ...}]}
            if not isinstance(node, dict) or not isinstance(node.get("datasets"), list):
                raise DatasetError(f"{path}: legacy split {split!r} needs a 'datasets' list")
            node = {"blend": node["datasets"]}
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
            if isinstance(node.get("path"), str) and Path(node["path"]).suffix in (".yaml", ".yml"):
                target = _beside(path, node["path"]).resolve()
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

    def node(self, node: Any, yaml_path: Path, ctx: _Context, stack: tuple[Path, ...], where: str) -> Source | Blend:
        if not isinstance(node, dict):
            raise DatasetError(f"{yaml_path}: {where} must be a mapping, got {node!r}")
        odd = [key for key in node if not isinstance(key, str)]
        if odd:
            raise DatasetError(f"{yaml_path}: {where} has keys that are not strings: {odd[:5]}")
        for key in node:
            if key in _UNSUPPORTED:
                raise DatasetError(
                    f"{yaml_path}: {where}.{key}: {_UNSUPPORTED[key]} ({key!r}) is not supported by datareel"
                )
        kinds = [k for k in ("blend", "blend_epochized", "path") if k in node]
        if len(kinds) != 1:
            raise DatasetError(
                f"{yaml_path}: {where} needs exactly one of 'path', 'blend', 'blend_epochized', got {sorted(node)}"
            )
        ctx = self.narrow(node, yaml_path, ctx, where)
        if "path" in node:
            unknown = sorted(set(node) - _REF_KEYS)
            if unknown:
                raise DatasetError(f"{yaml_path}: {where} has keys datareel does not support: {unknown}")
            return self.ref(node, yaml_path, ctx, stack, where)
        kind = kinds[0]
        unknown = sorted(
            set(node) - {kind, "subflavors", "shuffle_over_epochs_multiplier", "subset", "weight", "repetitions"}
        )
        if unknown:
            raise DatasetError(f"{yaml_path}: {where} has keys datareel does not support: {unknown}")
        items = node[kind]
        if not isinstance(items, list) or not items:
            raise DatasetError(f"{yaml_path}: {where}.{kind} must be a non-empty list")
        children = [self.node(item, yaml_path, ctx, stack, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
        if ctx.split != "train":
            return concat(children)
        if kind == "blend":
            weights = [self.number(item, "weight", yaml_path, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
            return mix(list(zip(children, weights)))
        reps = [self.number(item, "repetitions", yaml_path, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
        return mix_epochized(list(zip(children, reps)))

    @staticmethod
    def number(item: dict, key: str, yaml_path: Path, where: str) -> float:
        other = "repetitions" if key == "weight" else "weight"
        if other in item:
            raise DatasetError(
                f"{yaml_path}: {where} has {other!r}, which belongs in a "
                f"{'blend_epochized' if other == 'repetitions' else 'blend'} list"
            )
        value = item.get(key, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e300 or value != value:
            raise DatasetError(f"{yaml_path}: {where}.{key}={value!r} must be a positive number")
        return float(value)

    def narrow(self, node: dict, yaml_path: Path, ctx: _Context, where: str) -> _Context:
        """Apply a node's subflavors, shuffle multiplier and (relative) subset to the context."""
        subflavors = node.get("subflavors") or {}
        if not isinstance(subflavors, dict):
            raise DatasetError(f"{yaml_path}: {where}.subflavors must be a mapping")
        multiplier = ctx.multiplier
        if "shuffle_over_epochs_multiplier" in node:
            value = node["shuffle_over_epochs_multiplier"]
            if value not in (1, None):
                raise DatasetError(
                    f"{yaml_path}: {where}.shuffle_over_epochs_multiplier={value!r} is not supported "
                    f"(datareel supports 1: shuffle each epoch, and null: no shuffle)"
                )
            multiplier = None if value is None or multiplier is None else 1
        ranges = ctx.ranges
        if "subset" in node:
            ranges = (self.subset(node["subset"], yaml_path, where, leaf="path" in node),) + ranges
        # outer subflavors override inner ones: keep the outer values when merging later
        return _Context(ctx.split, {**subflavors, **ctx.subflavors}, multiplier, ranges)

    @staticmethod
    def subset(spec: Any, yaml_path: Path, where: str, leaf: bool) -> tuple[Any, Any]:
        if not (
            isinstance(spec, dict)
            and set(spec) == {"range"}
            and isinstance(spec["range"], list)
            and len(spec["range"]) == 2
        ):
            raise DatasetError(f"{yaml_path}: {where}.subset must be {{range: [start, end]}}, got {spec!r}")
        out = []
        for value in spec["range"]:
            if value == "end":
                out.append("end")
            elif isinstance(value, str) and value.endswith("%"):
                try:
                    share = float(value[:-1]) / 100
                except ValueError:
                    share = math.nan
                if not 0 <= share <= 1:  # also refuses nan
                    raise DatasetError(
                        f"{yaml_path}: {where}.subset range value {value!r} is not a percentage in [0%, 100%]"
                    ) from None
                out.append(("%", share))
            elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                if not leaf:
                    raise DatasetError(
                        f"{yaml_path}: {where}.subset: absolute ranges ({value}) are allowed only on datasets, "
                        f"use percentages here"
                    )
                out.append(value)
            else:
                raise DatasetError(
                    f"{yaml_path}: {where}.subset range value {value!r} must be 'N%', an integer or 'end'"
                )
        return tuple(out)

    def ref(self, node: dict, yaml_path: Path, ctx: _Context, stack: tuple[Path, ...], where: str) -> Source | Blend:
        for key in ("path", "split_part", "split_config", "dataset_config"):
            value = node.get(key, "-")
            if not isinstance(value, str) or not value:
                raise DatasetError(f"{yaml_path}: {where}.{key}={value!r} must be a non-empty string")
        target = _beside(yaml_path, node["path"])
        split = node.get("split_part", ctx.split)
        if target.suffix in (".yaml", ".yml"):
            inner = _Context(split, ctx.subflavors, ctx.multiplier, ctx.ranges)
            return self.metadataset(target, inner, stack)
        if target.suffix == ".jsonl":
            source: Source = JsonlSource(target)
        else:
            source = WebDatasetSource(
                target,
                split=split,
                image_decode=self.image_decode,
                decode=self.decode,
                subflavors=dict(ctx.subflavors),
                split_config=node.get("split_config", "split.yaml"),
                dataset_config=node.get("dataset_config", "dataset.yaml"),
            )
        start, stop = 0, len(source)
        for rng in ctx.ranges:  # innermost (the dataset's own) first
            start, stop = _apply_range(rng, start, stop, yaml_path, where)
        name = self.unique(f"{node['path']}/{split}" if target.suffix != ".jsonl" else str(node["path"]))
        if (start, stop) == (0, len(source)) and ctx.multiplier == 1 and name == source.name:
            return source
        return SourceView(source, start=start, stop=stop, shuffle=None if ctx.multiplier == 1 else False, name=name)

    def unique(self, name: str) -> str:
        count = self.names.get(name, 0) + 1
        self.names[name] = count
        return name if count == 1 else f"{name}#{count}"


def _beside(yaml_path: Any, path: str) -> Any:
    """``path`` from a metadataset at ``yaml_path``: relative to its directory (local or a URL); a URL or
    an absolute local path as it is, so local and remote datasets mix in one file."""
    return as_path(join(str(yaml_path.parent), path))


def _apply_range(rng: tuple[Any, Any], start: int, stop: int, yaml_path: Path, where: str) -> tuple[int, int]:
    length = stop - start

    def point(value: Any) -> int:
        if value == "end":
            return stop
        if isinstance(value, tuple):  # a percentage of the current range
            return start + int(length * value[1])
        return start + value  # absolute (datasets only, applied first)

    a, b = point(rng[0]), point(rng[1])
    if not start <= a < b <= stop:
        raise DatasetError(f"{yaml_path}: {where}.subset selects [{a}, {b}) outside [{start}, {stop}) or nothing")
    return a, b


__all__ = ["Blend", "Concat", "EpochizedMix", "Mix", "load_metadataset"]
