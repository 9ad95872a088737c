"""Energon's readings of a metadataset's tree, as visitors of datareel's one walk
(:class:`datareel.formats.metadataset.walk.Walk`): a split's or an entry's flattened leaves
(``get_datasets``: weights normalised per blend and multiplied down, repetitions multiplied, subsets merged
by Energon's arithmetic, :func:`.values.merge_subset`), its leaf references (``traverse``) and the joins and
included metadatasets ``prepare`` writes for.  The walk carries subflavors (outer over inner) and multipliers
(Energon's rule) down, follows nested metadatasets and names cycles; Energon's objects of the nodes are
:mod:`.views`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from ...errors import DatasetError, OptionError
from ...formats.metadataset.scope import Passive, Scope
from ...formats.metadataset.walk import Walk, detect, split_key
from ..epathlib import EPath
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


def scope_of(mds: Any, where: str, split: str, **values: Any) -> Scope:
    """The walk's scope of the node at ``where`` (in-file, ``splits.NAME...``) of the loaded metadataset ``mds``."""
    return Scope(yaml=mds.path, where=where, split=split, files=(split_key(mds.path, split),), **values)


class _Reader(Passive):
    """What every reading below does alike: an entry naming a metadataset takes none of a dataset's fields."""

    def metadataset(self, node: dict, target: Any, scope: Scope) -> None:
        for key in ("aux", "dataset_config", "split_config"):
            if node.get(key) is not None:
                raise DatasetError(f"{scope.place}: {key} cannot be set on an entry naming a metadataset (as Energon)")


def node_datasets(
    mds: Any,
    node: Any,
    where: str,
    request: Request,
    split_part: str,
    subflavors: dict[str, Any] | None,
    multiplier: int | None,
    subset: Any,
) -> LoadedDatasetList:
    """The flattened leaves of ``node`` at ``where`` of ``mds`` (see the module doc)."""
    scope = scope_of(mds, where, split_part, subflavors=dict(subflavors or {}), multiplier=multiplier)
    return cast(LoadedDatasetList, Walk(_Datasets(request, subset), place=beside).node(node, scope))


class _Datasets(_Reader):
    def __init__(self, request: Request, subset: Any):
        self.request, self.subset = request, subset

    def join(self, node: dict, scope: Scope) -> LoadedDatasetList:
        raise DatasetError(f"{scope.place}: {JOIN_REFUSED}")

    def dataset(self, node: dict, target: Any, scope: Scope) -> LoadedDatasetList:
        subset = self.subset
        for written in reversed(scope.subsets):  # outermost first, as Energon merges down the tree
            at = f"{written.yaml}: {written.where}"
            subset = merge_subset(parse_subset(written.spec, at), subset, at)
        args = dict(
            training=self.request.training,
            split_part=scope.part(node),
            worker_config=self.request.worker_config,
            subflavors=dict(scope.subflavors) or None,
            shuffle_over_epochs_multiplier=scope.combined(_energon_reading),
            subset=subset,
            **self.request.kwargs,
        )
        loader = DatasetLoader(target, split_config=node.get("split_config"), dataset_config=node.get("dataset_config"))
        result = loader.get_datasets(**args)
        if node.get("aux"):
            home = home_of(scope)
            stores = {
                str(k): aux_reference(v, home, scope.place).get_file_store()
                for k, v in aux_entries(node, scope.place).items()
            }
            for loaded in result.datasets:
                loaded.aux = {**(loaded.aux or {}), **stores}
        return result

    def blend(self, node: dict, kind: str, children: list[LoadedDatasetList], scope: Scope) -> LoadedDatasetList:
        if not children:
            raise DatasetError(f"{scope.place}.{kind} must be a non-empty list")
        key, mode = (
            ("weight", DatasetBlendMode.DATASET_WEIGHT)
            if kind == "blend"
            else ("repetitions", DatasetBlendMode.SAMPLE_REPETITIONS)
        )
        at = f"{scope.place}.{kind}"
        numbers = [_number(item, key, f"{at}[{i}]") for i, item in enumerate(node[kind])]
        total = sum(numbers)
        out = []
        for i, (inner, number) in enumerate(zip(children, numbers)):
            if inner.blend_mode not in (DatasetBlendMode.NONE, mode):
                raise DatasetError(
                    f"{at}[{i}]: can only blend datasets of the same blend mode; a blend and a blend_epochized "
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


def _energon_reading(value: Any, place: str) -> int | None:
    """An entry's ``shuffle_over_epochs_multiplier`` as megatron.energon reads a YAML's (with its fixes)."""
    try:
        return energon_multiplier(value, yaml=True)
    except OptionError as exc:
        raise DatasetError(f"{place}.{exc}") from None


def beside(yaml: EPath, path: str) -> EPath:
    """An entry's ``path`` from the metadataset at ``yaml`` (its ``MetadatasetV2.path``, or a path this gave), as
    Energon's ``EPath`` (``dss://`` names kept): what the facade's walks give their visitors as ``target``."""
    return yaml.parent / path


def home_of(scope: Scope) -> EPath:
    """The directory of the file holding the node (the walk keeps the facade's ``EPath``: :func:`beside`)."""
    return scope.yaml.parent


def _number(item: Any, key: str, where: str) -> float:
    value = item.get(key, 1.0 if key == "weight" else 1) if isinstance(item, dict) else 1
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise DatasetError(f"{where}.{key}={value!r} must be a positive number")
    return value


def aux_entries(node: dict, where: str) -> dict[str, Any]:
    aux = node.get("aux") or {}
    if not isinstance(aux, dict):
        raise DatasetError(f"{where}.aux must be a mapping of name -> path, got {aux!r:.80}")
    return aux


def traverse_node(
    mds: Any, node: Any, where: str, split_part: str, subflavors: dict[str, Any]
) -> list[TraversedDatasetReference]:
    """The leaf references under ``node`` at ``where``: paths resolved, nothing opened (a missing leaf is
    listed as it is)."""
    scope = scope_of(mds, where, split_part, subflavors=dict(subflavors))
    return cast(list, Walk(_Traversal(), place=beside).node(node, scope))


class _Traversal(_Reader):
    def join(self, node: dict, scope: Scope) -> list[TraversedDatasetReference]:
        raise NotImplementedError("traverse_metadataset() does not support joined datasets.")  # Energon's

    def blend(self, node: dict, kind: str, children: list[list], scope: Scope) -> list[TraversedDatasetReference]:
        return [ref for child in children for ref in child]

    def dataset(self, node: dict, target: Any, scope: Scope) -> list[TraversedDatasetReference]:
        aux = {}
        home = home_of(scope)
        for name, value in aux_entries(node, scope.place).items():
            ref = aux_reference(value, home, scope.place)
            aux[str(name)] = getattr(ref, "path", None) or ref.fs_path
        part = scope.part(node)
        return [TraversedDatasetReference(path=target, split_part=part, aux=aux, subflavors=scope.subflavors)]


def join_nodes(mds: Any, node: Any, split: str, found: list, included: list) -> None:
    """Collect under the split ``split`` of ``mds`` each join as ``(node, split, where)`` into ``found`` and
    each metadataset an entry includes into ``included`` (what ``prepare`` prepares)."""
    Walk(_Joins(found, included), follow=False, place=beside).node(node, scope_of(mds, f"splits.{split}", split))


class _Joins(_Reader):
    def __init__(self, found: list, included: list):
        self.found, self.included = found, included

    def join(self, node: dict, scope: Scope) -> None:
        self.found.append((node, scope.part(node), scope.place))

    def dataset(self, node: dict, target: Any, scope: Scope) -> None:
        if detect(target):
            self.included.append(target)


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


def resolved_entry(mds: Any, node: dict, target: Any, scope: Scope, *, joined: bool) -> dict[str, Any]:
    """A dataset entry's ``path`` (``target``, an ``EPath``: :func:`beside`) checked, its ``aux`` references and
    its ``_dataset`` (a nested metadataset is loaded and resolved as the metadataset ``mds`` that names it loads
    a file)."""
    where, path = scope.place, target
    if detect(target) and not joined:
        _Reader().metadataset(node, target, scope)
        inner = mds.nested(path)
        inner.post_initialize()
        return {"path": path, "_dataset": inner}
    if not (path.is_dir() or path.is_file()):
        raise DatasetError(
            f"{where}.path={node['path']!r}: {path} does not exist (paths are relative to {mds.path.name})"
        )
    if joined:
        return {"path": path}
    loader = DatasetLoader(path, split_config=node.get("split_config"), dataset_config=node.get("dataset_config"))
    resolved = {"path": path, "_dataset": loader}
    if node.get("aux") is not None:  # Energon's aux stays None when the entry has none
        home = home_of(scope)
        resolved["aux"] = {k: aux_reference(v, home, where) for k, v in aux_entries(node, where).items()}
    return resolved
