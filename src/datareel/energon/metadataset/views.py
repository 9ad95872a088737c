"""Energon's objects of a metadataset's entries, as ``MetadatasetV2.splits`` shows them — ``MetadatasetBlend``,
``MetadatasetBlendEpochized``, ``MetadatasetJoin``, ``DatasetReference`` and their blend / join kinds, ``Subset``
— made by :func:`view_node` from the file's mapping; read-only views whose ``get_datasets`` / ``traverse`` go
through the walk (:mod:`.walk`) over the mapping they show."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, replace
from typing import Any

from ...errors import DatasetError, OptionError
from ...formats.metadataset.scope import Passive, Scope
from ...formats.metadataset.walk import Walk
from ..multiplier import energon_multiplier
from .loader_interface import DatasetLoaderInterface, LoadedDatasetList, TraversedDatasetReference
from .values import DatasetSubset, merge_subset, parse_subset
from .walk import JOIN_REFUSED, Request, beside, joiner_of, node_datasets, resolved_entry, scope_of, traverse_node

__all__ = [
    "BlendDatasetReference",
    "BlendEpochizedDatasetReference",
    "BlendEpochizedJoinDatasetReference",
    "BlendJoinDatasetReference",
    "DatasetReference",
    "JoinDatasetReference",
    "MetadatasetBlend",
    "MetadatasetBlendEpochized",
    "MetadatasetJoin",
    "Subset",
    "view_node",
]


class _View:
    """A node of a loaded metadataset as Energon's class of the same name shows it; read-only once
    :func:`bind` ties it to the mapping it shows (what datareel reads)."""

    def __setattr__(self, name: str, value: Any) -> None:
        where = self.__dict__.get("_where")
        if where is not None:
            raise FrozenInstanceError(
                f"{type(self).__name__}.{name} of {where} is read-only: datareel reads the metadataset's mapping, "
                f"not this view of it; change {name!r} in the YAML (or in the mapping given to load_dataset) and "
                f"load it again"
            )
        object.__setattr__(self, name, value)

    def _bound(self, what: str) -> tuple[Any, dict, str]:
        where = self.__dict__.get("_where")
        if where is None:
            raise OptionError(
                f"{type(self).__name__}.{what}: this object was built in code, and datareel reads metadatasets "
                f"from their mapping; write it in a metadataset YAML (or a dict) and call load_dataset on that"
            )
        return self.__dict__["_mds"], self.__dict__["_node"], where


def bind(view: Any, mds: Any, node: Any, where: str) -> Any:
    """Tie ``view`` to the metadataset ``mds`` and the ``node`` it shows (at ``where``); it is read-only after."""
    object.__setattr__(view, "_mds", mds)
    object.__setattr__(view, "_node", node)
    object.__setattr__(view, "_where", where)
    return view


@dataclass(kw_only=True)
class Subset(_View):
    """Energon's ``subset: {range: [start, end]}`` of an entry, its values as written (``"N%"``, an
    integer, ``"end"``)."""

    range: Any

    def as_dataset_subset(self) -> DatasetSubset:
        where = self.__dict__.get("_where") or "subset"
        return parse_subset({"range": list(self.range)}, where)

    def merge(self, parent_subset: DatasetSubset | None) -> DatasetSubset | None:
        where = self.__dict__.get("_where") or "subset"
        return merge_subset(self.as_dataset_subset(), parent_subset, where)


class _Walked(_View, DatasetLoaderInterface):
    """``get_datasets`` / ``traverse`` of one entry, through :mod:`.walk` over the mapping it shows."""

    def post_initialize(self, mds_path: Any = None) -> None:
        """Nothing: its metadataset's ``post_initialize`` (``load_dataset`` calls it) resolved the view."""

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        mds, node, _ = self._bound("traverse")
        return traverse_node(mds, node, self.__dict__["_at"], split_part, dict(_subflavors or {}))

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        shuffle_over_epochs_multiplier: int | None = 1,
        subset: Any = None,
        **kwargs: Any,
    ) -> LoadedDatasetList:
        mds, node, where = self._bound("get_datasets")
        multiplier = energon_multiplier(shuffle_over_epochs_multiplier, f"{where}: get_datasets: ")
        request = Request(training, worker_config, kwargs)
        return node_datasets(mds, node, self.__dict__["_at"], request, split_part, subflavors, multiplier, subset)

    def prepare(self, split_part: str | None = None) -> tuple[Any, ...]:
        _, _, where = self._bound("prepare")
        raise OptionError(
            f"{where}: prepare one entry is not done by datareel; prepare the metadataset (MetadatasetV2.prepare, "
            f"prepare_metadataset or `energon prepare` on the YAML), which writes the join indexes of its splits"
        )


@dataclass(kw_only=True)
class DatasetReference(_Walked):
    """An entry naming a dataset or a metadataset (``path``); after ``post_initialize`` ``path`` is an
    ``EPath`` beside the file, ``aux`` maps names to ``AuxDatasetReference`` / ``AuxFilesystemReference``
    and ``_dataset`` is the loader of what it names (a ``DatasetLoader`` or the nested metadataset)."""

    subset: Subset | None = None
    path: Any
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    aux: dict[str, Any] | None = None
    _dataset: Any = None


@dataclass(kw_only=True)
class BlendDatasetReference(DatasetReference):
    """An item of a ``blend`` list naming a dataset, with its ``weight`` (as written; default 1.0)."""

    weight: float = 1.0


@dataclass(kw_only=True)
class BlendEpochizedDatasetReference(DatasetReference):
    """An item of a ``blend_epochized`` list naming a dataset, with its ``repetitions`` (default 1)."""

    repetitions: int | float = 1


@dataclass(kw_only=True)
class JoinDatasetReference(DatasetReference):
    """A dataset of a ``join`` (read by its join only), with its ``nonmatch`` (default ``"error"``)."""

    nonmatch: str = "error"

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        raise NotImplementedError("traverse_metadataset() does not support joined datasets.")  # Energon's

    def get_datasets(self, **kwargs: Any) -> LoadedDatasetList:
        _, _, where = self._bound("get_datasets")
        raise DatasetError(f"{where}: a dataset of a join is read by its join only; {JOIN_REFUSED}")


@dataclass(kw_only=True)
class MetadatasetJoin(_Walked):
    """A ``join`` of datasets (a list or a mapping of ``JoinDatasetReference``).  ``joiner`` is the class or
    function the YAML names when its module is imported (datareel imports nothing a metadataset names),
    else the YAML's mapping (``{__module__: M, __class__: C}``)."""

    subset: Subset | None = None
    join: Any
    joiner: Any
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    _dataset: Any = None


@dataclass(kw_only=True)
class BlendJoinDatasetReference(MetadatasetJoin):
    """A join as an item of a ``blend`` list, with its ``weight`` (default 1.0)."""

    weight: float = 1.0


@dataclass(kw_only=True)
class BlendEpochizedJoinDatasetReference(MetadatasetJoin):
    """A join as an item of a ``blend_epochized`` list, with its ``repetitions`` (default 1)."""

    repetitions: int | float = 1


@dataclass(kw_only=True)
class MetadatasetBlend(_Walked):
    """A ``blend``: its items sampled by weight."""

    subset: Subset | None = None
    blend: list[Any]


@dataclass(kw_only=True)
class MetadatasetBlendEpochized(_Walked):
    """A ``blend_epochized``: its items' samples repeated ``repetitions`` times per epoch."""

    subset: Subset | None = None
    blend_epochized: list[Any]


def view_node(mds: Any, node: Any, split: str, *, resolve: bool) -> Any:
    """Energon's object of the node ``node`` of split ``split`` of ``mds``
    (:class:`~.metadataset_v2.MetadatasetBlend`, ``DatasetReference``, ...: the view ``MetadatasetV2.splits``
    holds), made by the walk (not into nested files).  With ``resolve`` (``post_initialize``) each path is
    resolved beside the file and must exist, ``aux`` entries become references and a nested metadataset is
    loaded and checked (Energon checks when loading the file); without, values are as written."""
    return Walk(_Views(mds, resolve), follow=False, place=beside).node(node, scope_of(mds, f"splits.{split}", split))


class _Views(Passive):
    """The walk's visitor that makes Energon's object of each node."""

    def __init__(self, mds: Any, resolve: bool):
        self.mds, self.resolve = mds, resolve

    def blend(self, node: dict, kind: str, children: list[Any], scope: Scope) -> Any:
        # an inline blend inside a blend (datareel's extension) shows no weight: Energon's classes have none
        cls = MetadatasetBlend if kind == "blend" else MetadatasetBlendEpochized
        return self.bound(cls(subset=self.subset(node, scope), **{kind: children}), node, scope)

    def join(self, node: dict, scope: Scope) -> Any:
        items = node["join"]
        if isinstance(items, dict):
            joined: Any = {key: self.joined(item, scope, f"[{key}]") for key, item in items.items()}
        elif isinstance(items, list):
            joined = [self.joined(item, scope, f"[{i}]") for i, item in enumerate(items)]
        else:
            raise DatasetError(f"{scope.place}.join must be a list or a mapping of datasets, got {items!r:.80}")
        cls = _JOINS[scope.parent]
        joiner = joiner_of(node.get("joiner"), scope.place)
        fields = self.fields(node, scope)
        return self.bound(cls(subset=self.subset(node, scope), join=joined, joiner=joiner, **fields), node, scope)

    def joined(self, item: Any, scope: Scope, at: str) -> Any:
        """A dataset of a join (not a node of the walk: the join reads them)."""
        inner = replace(scope, where=f"{scope.where}.join{at}", parent="join")
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not item["path"]:
            raise DatasetError(f"{inner.place} must be a mapping with a non-empty 'path', got {item!r:.80}")
        return self.dataset(item, beside(scope.yaml, item["path"]), inner)

    def dataset(self, node: dict, target: Any, scope: Scope) -> Any:
        fields = {"path": node["path"], "aux": node.get("aux"), **self.fields(node, scope)}
        if scope.parent == "join":
            fields["nonmatch"] = node.get("nonmatch", "error")
        if self.resolve:
            fields.update(resolved_entry(self.mds, node, target, scope, joined=scope.parent == "join"))
        return self.bound(_REFERENCES[scope.parent](subset=self.subset(node, scope), **fields), node, scope)

    def fields(self, node: dict, scope: Scope) -> dict[str, Any]:
        """The fields every reference and join shows, as written, and its weight or repetitions."""
        fields = {key: node.get(key, 1 if key == "shuffle_over_epochs_multiplier" else None) for key in _COMMON}
        if scope.parent == "blend":
            fields["weight"] = node.get("weight", 1.0)
        elif scope.parent == "blend_epochized":
            fields["repetitions"] = node.get("repetitions", 1)
        return fields

    def subset(self, node: dict, scope: Scope) -> Subset | None:
        if "subset" not in node:
            return None
        parse_subset(node["subset"], scope.place)  # refused here, by name, when malformed
        return bind(Subset(range=node["subset"]["range"]), self.mds, node["subset"], f"{scope.place}.subset")

    def bound(self, view: Any, node: dict, scope: Scope) -> Any:
        view = bind(view, self.mds, node, scope.place)
        object.__setattr__(view, "_at", scope.where)
        return view


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
