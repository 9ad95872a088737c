"""The walk under :class:`~.metadataset_v2.MetadatasetV2` and :class:`~.metadataset_v2.Metadataset`: one node
of a split (a dataset reference, ``blend``, ``blend_epochized``, ``join``) -> its flattened leaves
(``get_datasets``), its leaf references (``traverse``) or the joins and nested metadatasets ``prepare``
writes for, with Energon's arithmetic: weights normalised per blend and multiplied down, repetitions
multiplied, subflavors outer-over-inner, multipliers combined (:func:`datareel.plan.over_epochs.combine`),
subsets merged (:func:`.values.merge_subset`).  A nested metadataset is loaded by the metadataset that
names it (``mds.nested(path)``); Energon's objects of the nodes are :mod:`.views`."""

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
from .values import aux_reference, merge_subset, parse_subset

JOIN_REFUSED = (
    "get_datasets of a join (join:) is not supported by datareel.energon: get_train_dataset / get_val_dataset / "
    "datareel.open_dataset read the metadataset with its joins (their index prepared by prepare_metadataset)"
)


@dataclass(frozen=True)
class Request:
    """What ``get_datasets`` was asked for, unchanged down the tree."""

    training: bool
    worker_config: Any
    kwargs: dict[str, Any]


def kind_of(node: Any, where: str) -> str:
    if not isinstance(node, dict):
        raise DatasetError(f"{where} must be a mapping, got {node!r:.80}")
    kinds = [k for k in ("path", "blend", "blend_epochized", "join") if k in node]
    if len(kinds) != 1:
        raise DatasetError(
            f"{where} needs exactly one of 'path', 'blend', 'blend_epochized', 'join'; got {sorted(node)}"
        )
    return kinds[0]


def target_of(mds: Any, node: dict, where: str) -> tuple[Any, bool]:
    """The path an entry names (relative to the metadataset's directory) and whether it is a metadataset."""
    path = node["path"]
    if not isinstance(path, str) or not path:
        raise DatasetError(f"{where}.path={path!r} must be a non-empty string")
    target = mds.path.parent / path
    return target, METADATASET.detect(as_path(str(target)))


def load_nested(mds: Any, node: dict, target: Any, where: str) -> Any:
    for key in ("aux", "dataset_config", "split_config"):
        if node.get(key) is not None:
            raise DatasetError(f"{where}: {key} cannot be set on an entry naming a metadataset (as Energon)")
    return mds.nested(target)  # loaded as the metadataset that names it loads a file (its own kind)


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
    kind = kind_of(node, where)
    if kind == "join":
        raise DatasetError(f"{where}: {JOIN_REFUSED}")
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
    target, nested = target_of(mds, node, where)
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
        return load_nested(mds, node, target, where).get_datasets(**args)
    loader = DatasetLoader(target, split_config=node.get("split_config"), dataset_config=node.get("dataset_config"))
    result = loader.get_datasets(**args)
    if node.get("aux"):
        stores = {
            str(k): aux_reference(v, mds.path.parent, where).get_file_store()
            for k, v in aux_entries(node, where).items()
        }
        for loaded in result.datasets:
            loaded.aux = {**(loaded.aux or {}), **stores}
    return result


def aux_entries(node: dict, where: str) -> dict[str, Any]:
    aux = node.get("aux") or {}
    if not isinstance(aux, dict):
        raise DatasetError(f"{where}.aux must be a mapping of name -> path, got {aux!r:.80}")
    return aux


def traverse_node(
    mds: Any, node: Any, split_part: str, subflavors: dict[str, Any], where: str
) -> list[TraversedDatasetReference]:
    """The leaf references under ``node``: paths resolved, nothing opened (a missing leaf is listed as it is)."""
    kind = kind_of(node, where)
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
    target, nested = target_of(mds, node, where)
    part = node.get("split_part") or split_part
    if nested:
        return load_nested(mds, node, target, where).traverse(split_part=part, _subflavors=merged)
    aux = {}
    for name, value in aux_entries(node, where).items():
        ref = aux_reference(value, mds.path.parent, where)
        aux[str(name)] = getattr(ref, "path", None) or ref.fs_path
    return [TraversedDatasetReference(path=target, split_part=part, aux=aux, subflavors=merged)]


def join_nodes(mds: Any, node: Any, split: str, where: str, found: list, nested: list) -> None:
    """Collect under ``node`` each join as ``(node, split, where)`` into ``found`` and each metadataset an entry
    includes into ``nested`` (what ``prepare`` prepares)."""
    kind = kind_of(node, where)
    if kind == "join":
        found.append((node, node.get("split_part") or split, where))
    elif kind == "path":
        target, is_mds = target_of(mds, node, where)
        if is_mds:
            nested.append(target)
    else:
        for i, item in enumerate(node.get(kind) or []):
            join_nodes(mds, item, split, f"{where}.{kind}[{i}]", found, nested)


def joiner_of(spec: Any, where: str) -> Any:
    """The object a join's ``joiner`` names when its module is imported, else the YAML's mapping as written
    (datareel imports nothing a metadataset names; reading the join resolves it, or names the fix)."""
    from ...blend.join import named_joiner

    if spec is None:
        return None
    try:
        return named_joiner(spec, where)[0]
    except DatasetError:
        return spec


def resolved_entry(mds: Any, node: dict, where: str, *, joined: bool) -> dict[str, Any]:
    """A dataset entry's ``path`` resolved and checked, its ``aux`` references and its ``_dataset``."""
    target, nested = target_of(mds, node, where)
    if nested and not joined:
        inner = load_nested(mds, node, target, where)
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
        resolved["aux"] = {k: aux_reference(v, mds.path.parent, where) for k, v in aux_entries(node, where).items()}
    return resolved
