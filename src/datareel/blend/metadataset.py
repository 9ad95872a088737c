"""Energon metadataset YAML (v2, and the legacy v1 list form) -> a datareel blend.

Supported: ``blend`` with ``weight``; ``blend_epochized`` with ``repetitions`` (``r · len``
rounded down, as Energon); nested metadatasets (read in the top split's mode: a train blend mixes
what it includes, whatever ``split_part`` names); ``path`` relative to the YAML (a prepared
directory, a ``.jsonl`` or another metadataset); ``split_part``; ``subflavors`` (outer ones
override inner ones) and the legacy v1 ``subflavor`` (``subflavors.__subflavor__``); ``aux``
(auxiliary datasets of a leaf, :mod:`.aux`); ``subset: {range: [a, b]}`` with percentages,
integers and ``end`` (absolute ranges only at datasets, applied first; percentages compose);
``shuffle_over_epochs_multiplier`` (``null``, ``1``, ``k >= 2``, ``-1``; multiplied down the tree
by Energon's rule, :mod:`datareel.plan.over_epochs`); ``dataset_config`` and ``split_config``; ``join``
(datasets joined by sample key into one source, :mod:`.join`: its index prepared beforehand).
A file without ``__class__`` is Energon's default, the legacy ``Metadataset``.  Val/test splits
concatenate their datasets (weights and repetitions are ignored there, as in Energon).  Anything
else — unknown keys, Energon's that datareel cannot honour — is refused naming the key: never dropped.

Every mapping is checked key by key (:mod:`.metadataset_rules`: ``ROOT_KEYS``, ``DATASET_KEYS``,
``BLEND_KEYS``, ``weight`` only in a ``blend`` item and ``repetitions`` only
in a ``blend_epochized`` one, ``subset: {range}``, a legacy split's ``datasets``):
an unknown key (``splitz``, ``wieght``) is a :class:`~datareel.DatasetError`
naming the file, the place, the allowed keys and the closest one; a key Energon
reads but datareel cannot honour (``REFUSED``) is refused by name.  An entry
whose ``path`` does not open names the YAML file and the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DatareelError, DatasetError, OptionError
from ..formats import METADATASET, format_of
from ..formats.metafiles import close_names
from ..plan.over_epochs import check_multiplier, combine
from ..sources.base import Source
from ..sources.joined import JoinedSource
from ..sources.view import SourceView
from ..storage.path import as_path
from .aux import attach_aux
from .join import open_join
from .metadataset_files import MetadatasetFiles
from .metadataset_rules import BLEND_KEYS as BLEND_KEYS
from .metadataset_rules import DATASET_KEYS as DATASET_KEYS
from .metadataset_rules import REFUSED as REFUSED
from .metadataset_rules import (
    apply_range,
    beside,
    check_entry_keys,
    check_weight_keys,
    entry_number,
    parse_subset,
)
from .tree import Blend, Concat, EpochizedMix, Mix, concat, mix, mix_epochized


class _Context:
    """What flows down the tree: split, subflavors, shuffle multiplier, relative subsets, and whether the
    tree is read for training (blends mix) or not (they concatenate): the top split's mode, kept by a
    nested metadataset whatever split it reads (as Energon's ``training`` flag)."""

    def __init__(self, split: str, subflavors: dict, multiplier: Any, ranges: tuple, training: bool):
        self.split, self.subflavors, self.multiplier, self.ranges = split, subflavors, multiplier, ranges
        self.training = training


def load_metadataset(
    path: str | Path,
    *,
    split: str = "train",
    image_decode: str | None = "torchrgb",
    decode: bool | str = True,
    shuffle_over_epochs_multiplier: int | None = 1,
    training: bool | None = None,
    joiners: Any = None,
    trust_dataset_code: bool = False,
) -> Source | Blend:
    """Open ``split`` of a metadataset YAML as a datareel dataset (see the module doc);
    ``shuffle_over_epochs_multiplier`` multiplies each dataset's own (Energon's rule,
    :func:`datareel.plan.over_epochs.combine`); ``training`` (default: ``split == "train"``) mixes
    blends by weight or repetitions, else concatenates them (also in the metadatasets it includes);
    ``joiners`` (``{"module.Name": obj}``) gives the joiners a ``join`` names in code (:mod:`.join`)."""
    try:
        multiplier = check_multiplier(shuffle_over_epochs_multiplier)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    builder = _Builder(image_decode=image_decode, decode=decode, joiners=joiners)
    builder.trust = trust_dataset_code  # its datasets' sample_loader.py may run
    context = _Context(split, {}, multiplier, (), split == "train" if training is None else bool(training))
    dataset = builder.metadataset(as_path(path), context, stack=())
    return dataset


class _Builder(MetadatasetFiles):
    def __init__(self, *, image_decode: str | None, decode: bool | str, joiners: Any = None):
        self.image_decode, self.decode, self.joiners = image_decode, decode, joiners
        self.trust = False
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

    def node(
        self,
        node: Any,
        yaml_path: Path,
        ctx: _Context,
        stack: tuple[Path, ...],
        where: str,
        parent: str | None = None,
    ) -> Source | Blend:
        """Build one entry at ``where``; ``parent`` is the kind of list holding it (``blend``,
        ``blend_epochized``) or ``None`` for a split's own node."""
        if not isinstance(node, dict):
            raise DatasetError(f"{yaml_path}: {where} must be a mapping, got {node!r:.80}")
        odd = [key for key in node if not isinstance(key, str)]
        if odd:
            raise DatasetError(f"{yaml_path}: {where} has keys that are not strings: {odd[:5]}")
        if "join" in node:
            check_weight_keys(node, yaml_path, where, parent)
            ctx = self.narrow(node, yaml_path, ctx, where)
            return self.join(node, yaml_path, ctx, where)
        check_entry_keys(node, yaml_path, where, parent)
        kinds = [k for k in ("blend", "blend_epochized", "path") if k in node]
        if len(kinds) != 1:
            raise DatasetError(
                f"{yaml_path}: {where} needs exactly one of 'path', 'blend', 'blend_epochized', got {sorted(node)}"
            )
        ctx = self.narrow(node, yaml_path, ctx, where)
        if "path" in node:
            return self.ref(node, yaml_path, ctx, stack, where)
        kind = kinds[0]
        items = node[kind]
        if not isinstance(items, list) or not items:
            raise DatasetError(f"{yaml_path}: {where}.{kind} must be a non-empty list")
        children = [
            self.node(item, yaml_path, ctx, stack, f"{where}.{kind}[{i}]", kind) for i, item in enumerate(items)
        ]
        if len(children) == 1 and isinstance(_unviewed(children[0]), JoinedSource):
            return children[0]  # Energon's blend of one is that dataset (for joins; a mix of one keeps its reel)
        if not ctx.training:
            return concat(children)
        if kind == "blend":
            weights = [entry_number(item, "weight", yaml_path, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
            return mix(list(zip(children, weights)))
        reps = [entry_number(item, "repetitions", yaml_path, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
        return mix_epochized(list(zip(children, reps)), rounding="energon")  # Energon rounds r·n down

    def narrow(self, node: dict, yaml_path: Path, ctx: _Context, where: str) -> _Context:
        """Apply a node's subflavors, shuffle multiplier and (relative) subset to the context."""
        subflavors = node.get("subflavors") or {}
        if not isinstance(subflavors, dict):
            raise DatasetError(f"{yaml_path}: {where}.subflavors must be a mapping")
        multiplier = ctx.multiplier
        if "shuffle_over_epochs_multiplier" in node:
            try:
                own = check_multiplier(node["shuffle_over_epochs_multiplier"])
            except ValueError as exc:
                raise DatasetError(f"{yaml_path}: {where}.{exc}") from None
            multiplier = combine(multiplier, own)
        ranges = ctx.ranges
        if "subset" in node:
            leaf = "path" in node or "join" in node
            ranges = (parse_subset(node["subset"], yaml_path, where, leaf=leaf),) + ranges
        # outer subflavors override inner ones: keep the outer values when merging later
        return _Context(ctx.split, {**subflavors, **ctx.subflavors}, multiplier, ranges, ctx.training)

    def ref(self, node: dict, yaml_path: Path, ctx: _Context, stack: tuple[Path, ...], where: str) -> Source | Blend:
        for key in ("path", "split_part", "split_config", "dataset_config"):
            value = node.get(key, "-")
            if not isinstance(value, str) or not value:
                raise DatasetError(f"{yaml_path}: {where}.{key}={value!r} must be a non-empty string")
        target = beside(yaml_path, node["path"])
        split = node.get("split_part", ctx.split)
        entry = f"{yaml_path}: {where}.path={node['path']!r}"
        kind = format_of(target)  # the first of datareel.formats.FORMATS that detects it
        if kind is METADATASET:
            if "aux" in node:
                raise DatasetError(
                    f"{entry}: aux belongs on a dataset entry, not on a metadataset it includes (as Energon); move it "
                    f"into that metadataset's entries"
                )
            try:
                found = target.is_file()
            except OSError as exc:
                raise DatasetError(f"{entry}: cannot open {target}: {exc.strerror or exc}") from None
            if not found:
                raise DatasetError(
                    f"{entry}: metadataset {target} does not exist{close_names(target)} (paths are relative to the "
                    f"directory of {yaml_path.name}); fix the path"
                )
            inner = _Context(split, ctx.subflavors, ctx.multiplier, ctx.ranges, ctx.training)
            return self.metadataset(target, inner, stack)
        try:
            source = kind.open(
                target,
                split=split,
                image_decode=self.image_decode,
                decode=self.decode,
                trust_dataset_code=self.trust,
                subflavors=dict(ctx.subflavors),
                name=None,
                split_config=node.get("split_config", "split.yaml"),
                dataset_config=node.get("dataset_config", "dataset.yaml"),
            )
        except DatasetError as exc:  # name the entry that led here (paths are relative to the YAML)
            raise _in_entry(exc, entry) from exc
        if not isinstance(source, Source):
            raise DatasetError(f"{entry}: {target} opens as a blend ({kind.name}), not as one dataset")
        name = self.unique(f"{node['path']}/{split}" if kind.splits else str(node["path"]))
        source = self.view(source, ctx, yaml_path, where, name)
        try:
            return attach_aux(source, node.get("aux"), yaml_path.parent)  # the leaf itself without aux
        except DatareelError as exc:
            raise _in_entry(exc, entry) from exc

    def view(self, source: Source, ctx: _Context, yaml_path: Path, where: str, name: str) -> Source:
        """``source`` narrowed by the context's subsets and shuffle multiplier, named ``name``."""
        start, stop = 0, len(source)
        for rng in ctx.ranges:  # innermost (the dataset's own) first
            start, stop = apply_range(rng, start, stop, yaml_path, where)
        if not ((start, stop) == (0, len(source)) and ctx.multiplier == 1 and name == source.name):
            shuffle, epochs = (False, 1) if ctx.multiplier is None else (None, ctx.multiplier)
            source = SourceView(source, start=start, stop=stop, shuffle=shuffle, name=name, over_epochs=epochs)
        return source

    def join(self, node: dict, yaml_path: Path, ctx: _Context, where: str) -> Source:
        """A ``join`` entry: its datasets joined by key (:func:`.join.open_join`), narrowed like a dataset."""
        from ..formats import WEBDATASET

        def open_item(item: dict, split: str, subflavors: dict) -> Any:
            target = beside(yaml_path, item["path"])
            try:
                return WEBDATASET.open(
                    target,
                    split=split,
                    image_decode=self.image_decode,
                    decode=self.decode,
                    trust_dataset_code=self.trust,
                    subflavors=subflavors,
                    name=None,
                    split_config=item.get("split_config", "split.yaml"),
                    dataset_config=item.get("dataset_config", "dataset.yaml"),
                )
            except DatasetError as exc:
                raise _in_entry(exc, f"{yaml_path}: {where}.join path={item['path']!r}") from exc

        source = open_join(node, yaml_path, ctx, where, open_item, self.joiners)
        return self.view(source, ctx, yaml_path, where, self.unique(source.name))

    def unique(self, name: str) -> str:
        count = self.names.get(name, 0) + 1
        self.names[name] = count
        return name if count == 1 else f"{name}#{count}"


def _unviewed(source: Any) -> Any:
    """``source`` without the views (subsets, multipliers) around it."""
    while isinstance(source, SourceView):
        source = source.base
    return source


def _in_entry(exc: DatasetError, entry: str) -> DatasetError:
    """``exc`` (its own type where it takes a message) with the metadataset entry that opened the dataset."""
    message = f"{entry}: {exc}"
    try:
        return type(exc)(message)
    except TypeError:
        return DatasetError(message)


__all__ = ["Blend", "Concat", "EpochizedMix", "Mix", "load_metadataset"]
