"""The walk under :class:`~.metadataset_v2.MetadatasetV2` and :class:`~.metadataset.Metadataset`: one node of
a split (a dataset reference, ``blend``, ``blend_epochized``, ``join``) -> its flattened leaves
(``get_datasets``), its leaf references (``traverse``) or Energon's object of it (``view_node``: what
``MetadatasetV2.splits`` shows, checked and resolved by ``post_initialize``), with Energon's arithmetic:
weights normalised per blend and multiplied down, repetitions multiplied, subflavors outer-over-inner,
multipliers combined (:func:`datareel.plan.over_epochs.combine`), subsets merged
(:func:`.metadataset_v2.merge_subset`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import DatasetError, OptionError
from ...formats import METADATASET
from ...plan.over_epochs import combine
from ...storage.path import as_path
from ..multiplier import energon_multiplier
from .dataset_loader import DatasetLoader
from .loader_interface import DatasetBlendMode, LoadedDatasetList, TraversedDatasetReference
from .metadataset_v2 import (
    BlendDatasetReference,
    BlendEpochizedDatasetReference,
    BlendEpochizedJoinDatasetReference,
    BlendJoinDatasetReference,
    DatasetReference,
    JoinDatasetReference,
    MetadatasetBlend,
    MetadatasetBlendEpochized,
    MetadatasetJoin,
    Subset,
    aux_reference,
    bind,
    merge_subset,
    parse_subset,
)

_JOIN = (
    "get_datasets of a join (join:) is not supported by datareel.energon: get_train_dataset / get_val_dataset / "
    "datareel.open_dataset read the metadataset with its joins (their index prepared by prepare_metadataset)"
)


@dataclass(frozen=True)
class Request:
    """What ``get_datasets`` was asked for, unchanged down the tree."""

    training: bool
    worker_config: Any
    kwargs: dict[str, Any]


def _kind(node: Any, where: str) -> str:
    if not isinstance(node, dict):
        raise DatasetError(f"{where} must be a mapping, got {node!r:.80}")
    kinds = [k for k in ("path", "blend", "blend_epochized", "join") if k in node]
    if len(kinds) != 1:
        raise DatasetError(
            f"{where} needs exactly one of 'path', 'blend', 'blend_epochized', 'join'; got {sorted(node)}"
        )
    return kinds[0]


def _target(mds: Any, node: dict, where: str) -> tuple[Any, bool]:
    """The path an entry names (relative to the metadataset's directory) and whether it is a metadataset."""
    path = node["path"]
    if not isinstance(path, str) or not path:
        raise DatasetError(f"{where}.path={path!r} must be a non-empty string")
    target = mds.path.parent / path
    return target, METADATASET.detect(as_path(str(target)))


def _nested(mds: Any, node: dict, target: Any, where: str) -> Any:
    for key in ("aux", "dataset_config", "split_config"):
        if node.get(key) is not None:
            raise DatasetError(f"{where}: {key} cannot be set on an entry naming a metadataset (as Energon)")
    from .loader import load_metadataset_file

    return load_metadataset_file(target)


def _merged(own: Any, outer: dict[str, Any] | None, where: str) -> dict[str, Any] | None:
    if own is None:
        return outer
    if not isinstance(own, dict):
        raise DatasetError(f"{where}.subflavors must be a mapping, got {own!r:.80}")
    return {**own, **(outer or {})}


def node_datasets(
    mds: Any,
    node: Any,
    request: Request,
    split_part: str,
    subflavors: dict[str, Any] | None,
    multiplier: int | None,
    subset: Any,
    where: str,
) -> LoadedDatasetList:
    """The flattened leaves of ``node`` (see the module doc)."""
    kind = _kind(node, where)
    if kind == "join":
        raise DatasetError(f"{where}: {_JOIN}")
    if "subset" in node:
        subset = merge_subset(parse_subset(node["subset"], where), subset, where)
    if kind == "path":
        return _reference(mds, node, request, split_part, subflavors, multiplier, subset, where)
    items = node[kind]
    if not isinstance(items, list) or not items:
        raise DatasetError(f"{where}.{kind} must be a non-empty list")
    key, mode = (
        ("weight", DatasetBlendMode.DATASET_WEIGHT)
        if kind == "blend"
        else ("repetitions", DatasetBlendMode.SAMPLE_REPETITIONS)
    )
    numbers = [_number(item, key, f"{where}.{kind}[{i}]") for i, item in enumerate(items)]
    total = sum(numbers)
    out = []
    for i, (item, number) in enumerate(zip(items, numbers)):
        inner = node_datasets(mds, item, request, split_part, subflavors, multiplier, subset, f"{where}.{kind}[{i}]")
        if inner.blend_mode not in (DatasetBlendMode.NONE, mode):
            raise DatasetError(
                f"{where}.{kind}[{i}]: can only blend datasets of the same blend mode; a blend and a blend_epochized "
                f"do not nest in each other (as Energon)"
            )
        for loaded in inner.datasets:
            if kind == "blend":
                weight = 1.0 if inner.blend_mode == DatasetBlendMode.NONE else loaded.weight
                loaded.weight = weight * number / total  # Energon's order of operations: the same floats
            else:
                reps = 1 if inner.blend_mode == DatasetBlendMode.NONE else loaded.repetitions
                loaded.repetitions = number * reps
            out.append(loaded)
    return LoadedDatasetList(blend_mode=mode, datasets=out)


def _number(item: Any, key: str, where: str) -> float:
    value = item.get(key, 1.0 if key == "weight" else 1) if isinstance(item, dict) else 1
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise DatasetError(f"{where}.{key}={value!r} must be a positive number")
    return value


def _reference(
    mds: Any,
    node: dict,
    request: Request,
    split_part: str,
    subflavors: dict[str, Any] | None,
    multiplier: int | None,
    subset: Any,
    where: str,
) -> LoadedDatasetList:
    subflavors = _merged(node.get("subflavors"), subflavors, where)
    try:
        own = energon_multiplier(node.get("shuffle_over_epochs_multiplier", 1), yaml=True)
    except OptionError as exc:
        raise DatasetError(f"{where}.{exc}") from None
    multiplier = combine(multiplier, own)
    target, nested = _target(mds, node, where)
    part = node.get("split_part") or split_part
    args = dict(
        training=request.training,
        split_part=part,
        worker_config=request.worker_config,
        subflavors=subflavors,
        shuffle_over_epochs_multiplier=multiplier,
        subset=subset,
        **request.kwargs,
    )
    if nested:
        return _nested(mds, node, target, where).get_datasets(**args)
    loader = DatasetLoader(target, split_config=node.get("split_config"), dataset_config=node.get("dataset_config"))
    result = loader.get_datasets(**args)
    if node.get("aux"):
        stores = {
            str(k): aux_reference(v, mds.path.parent, where).get_file_store() for k, v in _aux(node, where).items()
        }
        for loaded in result.datasets:
            loaded.aux = {**(loaded.aux or {}), **stores}
    return result


def _aux(node: dict, where: str) -> dict[str, Any]:
    aux = node.get("aux") or {}
    if not isinstance(aux, dict):
        raise DatasetError(f"{where}.aux must be a mapping of name -> path, got {aux!r:.80}")
    return aux


def traverse_node(
    mds: Any, node: Any, split_part: str, subflavors: dict[str, Any], where: str
) -> list[TraversedDatasetReference]:
    """The leaf references under ``node``: paths resolved, nothing opened (a missing leaf is listed as it is)."""
    kind = _kind(node, where)
    if kind == "join":
        raise NotImplementedError("traverse_metadataset() does not support joined datasets.")  # Energon's
    if kind != "path":
        items = node[kind]
        if not isinstance(items, list):
            raise DatasetError(f"{where}.{kind} must be a list")
        return [
            ref
            for i, item in enumerate(items)
            for ref in traverse_node(mds, item, split_part, subflavors, f"{where}.{kind}[{i}]")
        ]
    merged = dict(_merged(node.get("subflavors"), subflavors, where) or {})
    target, nested = _target(mds, node, where)
    part = node.get("split_part") or split_part
    if nested:
        return _nested(mds, node, target, where).traverse(split_part=part, _subflavors=merged)
    aux = {}
    for name, value in _aux(node, where).items():
        ref = aux_reference(value, mds.path.parent, where)
        aux[str(name)] = getattr(ref, "path", None) or ref.fs_path
    return [TraversedDatasetReference(path=target, split_part=part, aux=aux, subflavors=merged)]


def view_node(mds: Any, node: Any, where: str, *, resolve: bool, parent: str | None = None) -> Any:
    """Energon's object of ``node`` (:class:`~.metadataset_v2.MetadatasetBlend`, ``DatasetReference``, ...:
    the view ``MetadatasetV2.splits`` holds); ``parent`` is the kind of list holding it (``blend``,
    ``blend_epochized``, ``join``), ``None`` for a split's own node.  With ``resolve`` (``post_initialize``)
    each path is resolved beside the file and must exist, ``aux`` entries become references and a nested
    metadataset is loaded and checked (Energon checks when loading the file); without, values are as written."""
    kind = _kind(node, where)
    subset = None
    if "subset" in node:
        parse_subset(node["subset"], where)  # refused here, by name, when malformed
        subset = bind(Subset(range=node["subset"]["range"]), mds, node["subset"], f"{where}.subset")
    extra: dict[str, Any] = {}
    if parent == "blend":
        extra["weight"] = node.get("weight", 1.0)
    elif parent == "blend_epochized":
        extra["repetitions"] = node.get("repetitions", 1)
    if kind in ("blend", "blend_epochized"):
        items = node[kind]
        if not isinstance(items, list):
            raise DatasetError(f"{where}.{kind} must be a non-empty list, got {items!r:.80}")
        inner = [
            view_node(mds, item, f"{where}.{kind}[{i}]", resolve=resolve, parent=kind) for i, item in enumerate(items)
        ]
        # an inline blend inside a blend (datareel's extension) shows no weight: Energon's classes have none
        cls = MetadatasetBlend if kind == "blend" else MetadatasetBlendEpochized
        return bind(cls(subset=subset, **{kind: inner}), mds, node, where)
    common = {key: node.get(key, 1 if key == "shuffle_over_epochs_multiplier" else None) for key in _COMMON}
    if kind == "join":
        items = node["join"]
        if isinstance(items, dict):
            joined: Any = {
                key: view_node(mds, item, f"{where}.join[{key}]", resolve=resolve, parent="join")
                for key, item in items.items()
            }
        elif isinstance(items, list):
            joined = [
                view_node(mds, item, f"{where}.join[{i}]", resolve=resolve, parent="join")
                for i, item in enumerate(items)
            ]
        else:
            raise DatasetError(f"{where}.join must be a list or a mapping of datasets, got {items!r:.80}")
        cls = _JOINS[parent]
        joiner = _joiner(node.get("joiner"), where)
        return bind(cls(subset=subset, join=joined, joiner=joiner, **common, **extra), mds, node, where)
    if parent == "join":
        extra["nonmatch"] = node.get("nonmatch", "error")
    fields = {"path": node["path"], "aux": node.get("aux"), **common}
    if resolve:
        fields.update(_resolved(mds, node, where, joined=parent == "join"))
    return bind(_REFERENCES[parent](subset=subset, **fields, **extra), mds, node, where)


_COMMON = ("split_part", "subflavors", "shuffle_over_epochs_multiplier", "dataset_config", "split_config")
_REFERENCES = {
    None: DatasetReference,
    "blend": BlendDatasetReference,
    "blend_epochized": BlendEpochizedDatasetReference,
    "join": JoinDatasetReference,
}
_JOINS = {
    None: MetadatasetJoin,
    "blend": BlendJoinDatasetReference,
    "blend_epochized": BlendEpochizedJoinDatasetReference,
}


def _joiner(spec: Any, where: str) -> Any:
    """The object a join's ``joiner`` names when its module is imported, else the YAML's mapping as written
    (datareel imports nothing a metadataset names; reading the join resolves it, or names the fix)."""
    from ...blend.join import named_joiner

    if spec is None:
        return None
    try:
        return named_joiner(spec, where)[0]
    except DatasetError:
        return spec


def _resolved(mds: Any, node: dict, where: str, *, joined: bool) -> dict[str, Any]:
    """A dataset entry's ``path`` resolved and checked, its ``aux`` references and its ``_dataset``."""
    target, nested = _target(mds, node, where)
    if nested and not joined:
        inner = _nested(mds, node, target, where)
        inner.post_initialize()
        return {"path": target, "_dataset": inner}
    if not (target.is_dir() or target.is_file()):
        raise DatasetError(
            f"{where}.path={node['path']!r}: {target} does not exist (paths are relative to {mds.path.name})"
        )
    if joined:
        return {"path": target}
    loader = DatasetLoader(target, split_config=node.get("split_config"), dataset_config=node.get("dataset_config"))
    resolved = {"path": target, "_dataset": loader}
    if node.get("aux") is not None:  # Energon's aux stays None when the entry has none
        resolved["aux"] = {k: aux_reference(v, mds.path.parent, where) for k, v in _aux(node, where).items()}
    return resolved


def join_nodes(mds: Any, node: Any, split: str, where: str, found: list, nested: list) -> None:
    """Collect under ``node`` each join as ``(node, split, where)`` into ``found`` and each metadataset an entry
    includes into ``nested`` (what ``prepare`` prepares)."""
    kind = _kind(node, where)
    if kind == "join":
        found.append((node, node.get("split_part") or split, where))
    elif kind == "path":
        target, is_mds = _target(mds, node, where)
        if is_mds:
            nested.append(target)
    else:
        for i, item in enumerate(node.get(kind) or []):
            join_nodes(mds, item, split, f"{where}.{kind}[{i}]", found, nested)
