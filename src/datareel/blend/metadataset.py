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

The tree is read by the one metadataset walk (:mod:`datareel.formats.metadataset.walk`: files, the legacy
form, cycles, the size cap, nested metadatasets, subflavors, multipliers and subsets carried down); this
module is its visitor that builds.  Every mapping is checked key by key (:mod:`.metadataset_rules`: ``DATASET_KEYS``,
``BLEND_KEYS``, ``weight`` only in a ``blend`` item and ``repetitions`` only
in a ``blend_epochized`` one, ``subset: {range}``, a legacy split's ``datasets``):
an unknown key (``splitz``, ``wieght``) is a :class:`~datareel.DatasetError`
naming the file, the place, the allowed keys and the closest one; a key Energon
reads but datareel cannot honour (``REFUSED``) is refused by name.  An entry
whose ``path`` does not open names the YAML file and the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from ..errors import DatareelError, DatasetError, OptionError
from ..formats import WEBDATASET, format_of
from ..formats.metadataset.scope import Scope, yaml_multiplier
from ..formats.metadataset.walk import Walk, beside
from ..formats.metafiles import close_names
from ..plan.over_epochs import check_multiplier
from ..sources.base import Source
from ..sources.joined import JoinedSource
from ..sources.view import SourceView
from ..storage.path import as_path
from .aux import attach_aux
from .join import open_join
from .metadataset_rules import BLEND_KEYS as BLEND_KEYS
from .metadataset_rules import DATASET_KEYS as DATASET_KEYS
from .metadataset_rules import REFUSED as REFUSED
from .metadataset_rules import apply_range, check_entry_keys, check_weight_keys, entry_number, parse_subset
from .tree import Blend, Concat, EpochizedMix, Mix, concat, mix, mix_epochized


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
    subflavors: dict[str, Any] | None = None,
) -> Source | Blend:
    """Open ``split`` of a metadataset YAML as a datareel dataset (see the module doc); ``subflavors`` are the
    outermost (over every entry's, as Energon's ``get_train_dataset(subflavors=)``);
    ``shuffle_over_epochs_multiplier`` multiplies each dataset's own (Energon's rule,
    :func:`datareel.plan.over_epochs.combine`); ``training`` (default: ``split == "train"``) mixes
    blends by weight or repetitions, else concatenates them (also in the metadatasets it includes);
    ``joiners`` (``{"module.Name": obj}``) gives the joiners a ``join`` names in code (:mod:`.join`)."""
    try:
        multiplier = check_multiplier(shuffle_over_epochs_multiplier)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    builder = _Builder(
        image_decode=image_decode,
        decode=decode,
        joiners=joiners,
        trust=trust_dataset_code,  # its datasets' sample_loader.py may run
        training=split == "train" if training is None else bool(training),  # kept by the metadatasets it includes
    )
    top = as_path(path).resolve()
    outer = dict(subflavors or {})
    dataset = Walk(builder).tree(
        top, split, Scope(yaml=top, where="", split=split, subflavors=outer, multiplier=multiplier)
    )
    return cast("Source | Blend", dataset)  # a strict walk skips nothing


class _Builder:
    """The walk's visitor that builds the blend (sources, mixes, concatenations, joins)."""

    def __init__(self, *, image_decode: str | None, decode: bool | str, joiners: Any, trust: bool, training: bool):
        self.image_decode, self.decode, self.joiners = image_decode, decode, joiners
        self.trust, self.training = trust, training
        self.names: dict[str, int] = {}

    def enter(self, node: dict, scope: Scope) -> None:
        if "join" in node:
            check_weight_keys(node, scope.yaml, scope.where, scope.parent)
        else:
            check_entry_keys(node, scope.yaml, scope.where, scope.parent)
        if "subset" in node:  # refused at the entry that wrote it
            parse_subset(node["subset"], scope.yaml, scope.where, leaf="path" in node or "join" in node)
        if "shuffle_over_epochs_multiplier" in node:
            yaml_multiplier(node["shuffle_over_epochs_multiplier"], scope.place)

    def blend(self, node: dict, kind: str, children: list[Any], scope: Scope) -> Source | Blend:
        if not children:
            raise DatasetError(f"{scope.place}.{kind} must be a non-empty list")
        if len(children) == 1 and isinstance(_unviewed(children[0]), JoinedSource):
            return children[0]  # Energon's blend of one is that dataset (for joins; a mix of one keeps its reel)
        if not self.training:
            return concat(children)
        items, at = node[kind], f"{scope.where}.{kind}"
        if kind == "blend":
            weights = [entry_number(item, "weight", scope.yaml, f"{at}[{i}]") for i, item in enumerate(items)]
            return mix(list(zip(children, weights)))
        reps = [entry_number(item, "repetitions", scope.yaml, f"{at}[{i}]") for i, item in enumerate(items)]
        return mix_epochized(list(zip(children, reps)), rounding="energon")  # Energon rounds r·n down

    def metadataset(self, node: dict, target: Any, scope: Scope) -> None:
        _check_strings(node, scope)
        entry = f"{scope.place}.path={node['path']!r}"
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
                f"directory of {scope.yaml.name}); fix the path"
            )

    def dataset(self, node: dict, target: Any, scope: Scope) -> Source:
        _check_strings(node, scope)
        split = scope.part(node)
        entry = f"{scope.place}.path={node['path']!r}"
        kind = format_of(target)  # the first of datareel.formats.FORMATS that detects it
        try:
            source = kind.open(
                target,
                split=split,
                image_decode=self.image_decode,
                decode=self.decode,
                trust_dataset_code=self.trust,
                subflavors=dict(scope.subflavors),
                name=None,
                split_config=node.get("split_config", "split.yaml"),
                dataset_config=node.get("dataset_config", "dataset.yaml"),
            )
        except DatasetError as exc:  # name the entry that led here (paths are relative to the YAML)
            raise _in_entry(exc, entry) from exc
        if not isinstance(source, Source):
            raise DatasetError(f"{entry}: {target} opens as a blend ({kind.name}), not as one dataset")
        name = self.unique(f"{node['path']}/{split}" if kind.splits else str(node["path"]))
        source = self.view(source, scope, name)
        try:
            return attach_aux(source, node.get("aux"), scope.yaml.parent)  # the leaf itself without aux
        except DatareelError as exc:
            raise _in_entry(exc, entry) from exc

    def view(self, source: Source, scope: Scope, name: str) -> Source:
        """``source`` narrowed by the scope's subsets and shuffle multiplier, named ``name``."""
        start, stop = 0, len(source)
        for written in scope.subsets:  # innermost (the dataset's own) first
            rng = parse_subset(written.spec, written.yaml, written.where, leaf=written.leaf)
            start, stop = apply_range(rng, start, stop, scope.yaml, scope.where)
        multiplier = scope.combined()
        if not ((start, stop) == (0, len(source)) and multiplier == 1 and name == source.name):
            shuffle, epochs = (False, 1) if multiplier is None else (None, multiplier)
            source = SourceView(source, start=start, stop=stop, shuffle=shuffle, name=name, over_epochs=epochs)
        return source

    def join(self, node: dict, scope: Scope) -> Source:
        """A ``join`` entry: its datasets joined by key (:func:`.join.open_join`), narrowed like a dataset."""
        yaml_path, where = scope.yaml, scope.where

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

        source = open_join(node, yaml_path, scope, where, open_item, self.joiners)
        return self.view(source, scope, self.unique(source.name))

    def unique(self, name: str) -> str:
        count = self.names.get(name, 0) + 1
        self.names[name] = count
        return name if count == 1 else f"{name}#{count}"


def _check_strings(node: dict, scope: Scope) -> None:
    for key in ("split_config", "dataset_config"):
        value = node.get(key, "-")
        if not isinstance(value, str) or not value:
            raise DatasetError(f"{scope.place}.{key}={value!r} must be a non-empty string")
    scope.part(node)


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
