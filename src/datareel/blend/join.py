"""A metadataset's ``join:`` -> a :class:`~datareel.sources.joined.JoinedSource` (and, for
``prepare_metadataset``, the join index it reads).

``join`` is a list (the joiner gets the samples as arguments) or a mapping ``name: entry`` (as keyword
arguments); the first entry is the primary, whose samples (of its split, in split order, excluded ones
left out) are the join's rows.  An entry is a prepared WebDataset: ``path``, ``split_part``,
``split_config``, ``dataset_config``, ``subflavors`` and ``nonmatch`` (``error``, ``skip``: an inner
join on that dataset, ``none``: a left join, ``None`` where it has no match).  The join itself takes
``joiner``, ``split_part`` (for entries that name none), ``subflavors``, ``subset`` and
``shuffle_over_epochs_multiplier`` (applied to the join's rows, as to any dataset), and in a blend its
``weight`` / ``repetitions``.

``joiner: {__module__: M, __class__: C}`` (or ``__function__: F``) names Python code; datareel imports
nothing a YAML names: the object is taken from a module the program has already imported
(``sys.modules[M]``), or from ``joiners={"M.C": obj}`` given in code.  The join index must have been
prepared (:func:`prepare_joins`, what Energon's ``prepare_metadataset`` does): loading never writes it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..formats.join import NONMATCH, Column, JoinIndex, clashes, energon_index_path, index_path, prepare_join
from ..formats.metadataset.scope import Passive, Scope
from ..formats.metadataset.walk import Walk, beside
from ..formats.metafiles import check_keys

JOIN_KEYS = ("join", "joiner", "split_part", "subflavors", "shuffle_over_epochs_multiplier", "subset")
"""Keys of a join node (besides its ``weight`` / ``repetitions`` in a blend)."""
ITEM_KEYS = ("path", "split_part", "split_config", "dataset_config", "subflavors", "nonmatch")
"""Keys of one joined dataset."""
_JOIN_REFUSED = {
    "dataset_config": "a join takes no dataset_config (as Energon); set it on the joined datasets",
    "split_config": "a join takes no split_config (as Energon); set it on the joined datasets",
    "path": "a join node joins the datasets of its 'join' list; a dataset's 'path' belongs in there",
}
_ITEM_REFUSED = {
    "subset": "a joined dataset takes no subset (Energon ignores it there); put subset on the join",
    "aux": "a joined dataset takes no aux (Energon ignores it there); join the auxiliary dataset instead",
    "shuffle_over_epochs_multiplier": "a joined dataset takes no shuffle_over_epochs_multiplier (the join's rows "
    "are shuffled, not its datasets'); put it on the join",
    "join": "joins do not nest; list every dataset in one join",
    "blend": "a joined dataset is a prepared dataset, not a blend",
    "blend_epochized": "a joined dataset is a prepared dataset, not a blend",
}


def cache_dir(yaml_path: Path) -> Path:
    """Where a metadataset's join indexes live: ``<file>.cache/`` beside it (Energon's place)."""
    return Path(yaml_path).parent / f"{Path(yaml_path).name}.cache"


def join_items(node: dict, yaml_path: Path, where: str) -> tuple[list[tuple[str | None, dict]], bool]:
    """The ``join`` entries as ``(name or None, entry)`` and whether they are named (a mapping)."""
    check_keys(node, JOIN_KEYS + ("weight", "repetitions"), f"{yaml_path}: {where}", "a join", _JOIN_REFUSED)
    if "joiner" not in node:
        raise DatasetError(f"{yaml_path}: {where} joins datasets but names no joiner (Energon requires one)")
    items = node["join"]
    if isinstance(items, dict):
        pairs = [(str(k), v) for k, v in items.items()]
    elif isinstance(items, list):
        pairs = [(None, v) for v in items]
    else:
        raise DatasetError(f"{yaml_path}: {where}.join must be a list or a mapping of datasets, got {items!r:.80}")
    if len(pairs) < 2:
        raise DatasetError(f"{yaml_path}: {where}.join needs at least two datasets (the primary and one more)")
    for i, (name, item) in enumerate(pairs):
        here = f"{yaml_path}: {where}.join[{name if name is not None else i}]"
        if not isinstance(item, dict):
            raise DatasetError(f"{here} must be a mapping with 'path', got {item!r:.80}")
        check_keys(item, ITEM_KEYS, here, "a joined dataset", _ITEM_REFUSED)
        for key in ("path", "split_part", "split_config", "dataset_config", "nonmatch"):
            value = item.get(key, "-")
            if not isinstance(value, str) or not value:
                raise DatasetError(f"{here}.{key}={value!r} must be a non-empty string")
        if item.get("nonmatch", "error") not in NONMATCH:
            raise DatasetError(f"{here}.nonmatch={item['nonmatch']!r}: give one of {list(NONMATCH)}")
        if i == 0 and item.get("nonmatch", "error") != "error":
            raise DatasetError(
                f"{here}: the primary dataset (the first) takes no nonmatch; its samples are the join's rows"
            )
    return pairs, isinstance(items, dict)


def columns_of(node: dict, yaml_path: Path, split: str, where: str) -> list[Column]:
    """The joined datasets of ``node`` as prepare reads them (split: the entry's, the join's, else ``split``)."""
    pairs, _ = join_items(node, yaml_path, where)
    out = []
    for _, item in pairs:
        target = beside(yaml_path, item["path"])
        if not isinstance(target, Path):
            raise DatasetError(
                f"{yaml_path}: {where}: joined dataset {item['path']!r} is not a local directory; datareel joins "
                f"local prepared datasets (their index.sqlite is read when the join is prepared)"
            )
        part = item.get("split_part") or node.get("split_part") or split
        out.append(Column(target, part, item.get("split_config", "split.yaml"), item.get("nonmatch", "error")))
    return out


def file_joins(yaml_path: Path) -> list[tuple[list[Column], str]]:
    """Every join the metadataset file at ``yaml_path`` defines, in any split, as ``(columns, where)``
    (joins in the files it includes have their own cache; a join whose datasets cannot be read is left
    out, and named when it is loaded or prepared).  Two of them may clash on Energon's index name."""
    joins = _Joins()
    walk: Walk[None] = Walk(joins, follow=False, lenient=True)
    try:
        splits = walk.document(Path(yaml_path))["splits"]
    except DatasetError:
        return []
    for split in splits:
        if isinstance(split, str):
            try:
                walk.tree(Path(yaml_path), split)
            except DatasetError:
                pass
    return joins.found


class _Joins(Passive):
    """The walk's visitor that lists a file's joins (:func:`file_joins`)."""

    def __init__(self) -> None:
        self.found: list[tuple[list[Column], str]] = []

    def join(self, node: dict, scope: Scope) -> None:
        try:
            self.found.append(
                (columns_of(node, scope.yaml, node.get("split_part") or scope.split, scope.where), scope.where)
            )
        except DatasetError:
            pass


def join_index(yaml_path: Path, columns: list[Column], where: str) -> JoinIndex:
    """The prepared join index of ``columns`` (the join at ``where``); an index Energon wrote under its
    shared name for a join that clashes with another of the file is refused, naming both."""
    others = file_joins(yaml_path)
    path = index_path(cache_dir(yaml_path), columns, others)
    shared = energon_index_path(cache_dir(yaml_path), columns)
    if path != shared and not path.is_file() and shared.is_file():
        raise DatasetError(
            f"{yaml_path}: {where} and {', '.join(clashes(columns, others))} join the same datasets but read other "
            f"split parts, and Energon names their join index alike ({shared.name}, without the split): that file "
            f"holds one of them only, so the others would read its rows. datareel names each by its split: "
            f"prepare the metadataset with datareel (datareel.energon.metadataset.loader.prepare_metadataset, or "
            f"the facade's `energon prepare` on the YAML)"
        )
    return JoinIndex(path)


def _defined_in(loaded: Any, module: str, name: Any, where: str) -> Any:
    """``module``'s object ``name`` (a dotted path of public names), refused unless it is defined in
    ``module`` or a submodule of it: an attribute path may not walk into what the module imported."""
    parts = str(name).split(".")
    private = [part for part in parts if not part or part.startswith("_")]
    if private:
        raise DatasetError(
            f"{where}.joiner: {name!r} has parts that are empty or start with '_' ({private}); a joiner is a public "
            f"function or class of {module}: name it by its public name"
        )
    obj = loaded
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            raise DatasetError(f"{where}.joiner: module {module!r} has no {name!r}; fix the joiner's name")
    home = getattr(obj, "__module__", None)
    if not (isinstance(home, str) and (home == module or home.startswith(f"{module}."))):
        raise DatasetError(
            f"{where}.joiner: {module}.{name} is {name!r} of module {module!r}, but it is defined in {home!r}; "
            f"datareel takes only objects defined in the module a YAML names: name {home}.<its name> instead, "
            f"or pass it in code (load_metadataset(..., joiners={{{f'{module}.{name}'!r}: obj}}))"
        )
    return obj


def named_joiner(spec: Any, where: str, joiners: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The object a YAML's joiner names, as named (a class or a function), -> (object, ``"module.name"``);
    see the module doc."""
    kinds = [k for k in ("__class__", "__function__") if isinstance(spec, dict) and k in spec]
    if not (isinstance(spec, dict) and isinstance(spec.get("__module__"), str) and len(kinds) == 1):
        raise DatasetError(
            f"{where}.joiner must be {{__module__: M, __class__: C}} or {{__module__: M, __function__: F}}, got "
            f"{spec!r:.120}"
        )
    extra = sorted(set(spec) - {"__module__", kinds[0]})
    if extra:
        raise DatasetError(f"{where}.joiner: keys {extra} are not read; a joiner names __module__ and one object")
    module, name = spec["__module__"], spec[kinds[0]]
    label = f"{module}.{name}"
    if joiners and label in joiners:
        obj = joiners[label]
    else:
        loaded = sys.modules.get(module)
        if loaded is None:
            raise DatasetError(
                f"{where}.joiner names {label}, but module {module!r} is not imported; datareel never imports what a "
                f"dataset names. Import {module} in your program before loading the dataset, or pass the joiner in "
                f"code: load_metadataset(..., joiners={{{label!r}: obj}})"
            )
        obj = _defined_in(loaded, module, name, where)
    if kinds[0] == "__class__" and not isinstance(obj, type):
        raise DatasetError(f"{where}.joiner: __class__ {label} is not a class; name a function with __function__")
    return obj, label


def resolve_joiner(spec: Any, where: str, joiners: Mapping[str, Any] | None = None) -> tuple[Callable[..., Any], str]:
    """The joiner a YAML names -> (callable, ``"module.name"``); see the module doc."""
    from ..sources.typed import Sample, sample_joiner

    obj, label = named_joiner(spec, where, joiners)
    if isinstance(obj, type) and issubclass(obj, Sample):
        return sample_joiner(obj), label
    if not callable(obj):
        raise DatasetError(f"{where}.joiner: {label} is not callable")
    return obj, label


def open_join(
    node: dict, yaml_path: Path, ctx: Any, where: str, open_item: Callable[..., Any], joiners: Any = None
) -> Any:
    """The :class:`~datareel.sources.joined.JoinedSource` of a join ``node`` (``ctx``: the builder's context,
    its subflavors already narrowed by the join's; ``open_item(item, split, subflavors)`` opens one dataset)."""
    from ..formats.webdataset.reader import WebDatasetSource
    from ..sources.joined import JoinedSource

    pairs, named = join_items(node, yaml_path, where)
    joiner, label = resolve_joiner(node["joiner"], f"{yaml_path}: {where}", joiners)
    columns = columns_of(node, yaml_path, ctx.split, where)
    sources, parts = [], []
    for (name, item), column in zip(pairs, columns):
        own = item.get("subflavors") or {}
        if not isinstance(own, dict):
            raise DatasetError(f"{yaml_path}: {where}.join[{name}].subflavors must be a mapping")
        source = open_item(item, column.split, {**own, **ctx.subflavors})
        if type(source) is not WebDatasetSource:
            raise DatasetError(
                f"{yaml_path}: {where}: joined dataset {item['path']!r} is not a prepared WebDataset (as Energon, "
                f"only those join)"
            )
        _, _, _, files, kept, _ = column.files()
        at = {shard: s for s, shard in enumerate(source.shards)}
        parts.append(np.array([at.get(shard, -1) for shard in files], dtype=np.int64))
        sources.append(source)
    index = join_index(yaml_path, columns, where)
    names = tuple(name for name, _ in pairs) if named else None
    title = f"join({','.join(str(item['path']) for _, item in pairs)})"
    return JoinedSource(sources, index, parts, joiner, names=names, name=title, joiner_name=label)


def prepare_joins(yaml_path: Path, nodes: list[tuple[dict, str, str]]) -> list[Path]:
    """Write the join index of each ``(join node, split, where)`` of the metadataset at ``yaml_path`` that
    is not prepared yet, then remove every other file of its cache directory (Energon's cleanup) ->
    the indexes."""
    written = []
    others = file_joins(yaml_path)
    for node, split, where in nodes:
        path, _ = prepare_join(cache_dir(yaml_path), columns_of(node, yaml_path, split, where), others)
        written.append(path)
    folder = cache_dir(yaml_path)
    if folder.is_dir():
        for stale in folder.iterdir():
            if stale.is_file() and stale not in written:
                stale.unlink()
    return written
