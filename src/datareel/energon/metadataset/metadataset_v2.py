"""Energon's ``megatron.energon.metadataset.metadataset_v2``: ``MetadatasetV2`` — a metadataset's splits as
Energon reads them for ``get_datasets`` (the flattened leaves of a split, weights multiplied down to
absolute ones, repetitions multiplied, subflavors merged outer-over-inner, multipliers combined by
Energon's rule, subsets merged) and for ``traverse`` (leaf paths, split parts, aux paths, subflavors).

The reel itself is built from the same file by :mod:`datareel.blend.metadataset` (what
``get_train_dataset`` reads); this module answers the questions Energon's objects answer.  ``prepare``
writes the join indexes a split's joins read
(:func:`datareel.blend.join.prepare_joins`).  ``AuxFilesystemReference`` / ``AuxDatasetReference``
are the two kinds of ``aux:`` entry.

``MetadatasetV2.splits`` holds each split as Energon's object of the same name gives it —
``MetadatasetBlend(subset, blend=[BlendDatasetReference(path, split_part, subflavors, aux, weight, ...)])``,
``MetadatasetBlendEpochized``, ``MetadatasetJoin``, ``DatasetReference`` — with the values Energon gives after
``post_initialize`` (paths as :class:`~datareel.energon.epathlib.EPath` beside the file, ``aux`` entries as
``AuxDatasetReference`` / ``AuxFilesystemReference``, ``weight`` / ``repetitions`` as written, default 1.0 / 1).
They are a read-only view (:func:`.walk.view_node`): ``get_datasets`` / ``traverse`` of a split or of one of
its entries go through the same walk over the file's mapping, so a changed field would be read by nothing
and an assignment is refused, naming the YAML key to edit.
"""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, dataclass
from typing import Any

from ...errors import DatasetError, OptionError
from ..multiplier import energon_multiplier
from .loader_interface import DatasetLoaderInterface, LoadedDatasetList, TraversedDatasetReference

__all__ = [
    "AuxDatasetReference",
    "AuxFilesystemReference",
    "BlendDatasetReference",
    "BlendEpochizedDatasetReference",
    "BlendEpochizedJoinDatasetReference",
    "BlendJoinDatasetReference",
    "DatasetReference",
    "DatasetSubset",
    "JoinDatasetReference",
    "MetadatasetBlend",
    "MetadatasetBlendEpochized",
    "MetadatasetJoin",
    "MetadatasetV2",
    "Subset",
]

_URL = re.compile(r"^(?P<protocol>[a-z][a-z0-9+.-]*)://(?P<path>.*)", re.IGNORECASE)


@dataclass(frozen=True)
class DatasetSubset:
    """Energon's subset of a leaf: ``range`` (shares of it, ``(0, 1)`` = all) after ``absolute_range``
    (sample indices ``(start, end)``, ``end`` ``None`` for the end; leaves only)."""

    range: tuple[float, float] | None = (0.0, 1.0)
    absolute_range: tuple[int, int | None] | None = None


def parse_subset(spec: Any, where: str) -> DatasetSubset:
    """``{range: [a, b]}`` (``"N%"``, integers, ``"end"``) -> a :class:`DatasetSubset`, as Energon's ``Subset``."""
    if not (isinstance(spec, dict) and isinstance(spec.get("range"), list) and len(spec["range"]) == 2):
        raise DatasetError(f"{where}.subset must be {{range: [start, end]}}, got {spec!r:.80}")

    def value(v: Any) -> float | int | None:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip() == "end":
            return None
        if isinstance(v, str) and v.endswith("%"):
            try:
                share = float(v[:-1])
            except ValueError:
                share = -1.0
            if 0 <= share <= 100:
                return share / 100
        raise DatasetError(f"{where}.subset range value {v!r} must be 'N%' (0 to 100), an integer or 'end'")

    start, end = (value(v) for v in spec["range"])
    if isinstance(start, int):
        if not (end is None or isinstance(end, int)):
            raise DatasetError(f"{where}.subset: an integer start needs an integer end or 'end', got {end!r}")
        return DatasetSubset(range=(0.0, 1.0), absolute_range=(start, end))
    if not isinstance(start, float) or not isinstance(end, float) or start > end:
        raise DatasetError(f"{where}.subset: shares need start <= end (both 'N%'), got {spec['range']!r}")
    return DatasetSubset(range=(start, end))


def merge_subset(own: DatasetSubset | None, outer: DatasetSubset | None, where: str) -> DatasetSubset | None:
    """This node's subset composed with the one its parents give (Energon's ``Subset.merge``)."""
    if outer is not None and outer.absolute_range is not None:
        raise DatasetError(f"{where}: absolute subset ranges are only allowed for a leaf dataset, not on a blend")
    if own is None:
        return outer
    if outer is None or outer.range is None:
        return own
    lo, hi = own.range or (0.0, 1.0)
    total = hi - lo
    return DatasetSubset(
        range=(lo + outer.range[0] * total, lo + outer.range[1] * total), absolute_range=own.absolute_range
    )


@dataclass
class AuxDatasetReference:
    """An ``aux:`` entry naming a prepared dataset (read by key through a WebDataset file store)."""

    path: Any

    def get_file_store(self) -> Any:
        from ..cache.file_store import WebdatasetFileStore

        return WebdatasetFileStore(self.path)


@dataclass
class AuxFilesystemReference:
    """An ``aux:`` entry naming a directory of files (``filesystem://DIR``, ``filesystem+msc://...``)."""

    fs_path: Any

    def get_file_store(self) -> Any:
        from ..cache.file_store import SystemFileStore

        return SystemFileStore(self.fs_path)


def aux_reference(value: Any, mds_dir: Any, where: str) -> AuxDatasetReference | AuxFilesystemReference:
    """One ``aux:`` value resolved against the metadataset's directory, as Energon normalises it."""
    from ..epathlib import EPath

    if not isinstance(value, str) or not value:
        raise DatasetError(f"{where}: aux value {value!r} must be a path (a prepared dataset or filesystem://DIR)")
    match = _URL.match(value)
    if match is None:
        return AuxDatasetReference(path=mds_dir / value)
    protocol = match.group("protocol")
    if protocol == "filesystem":
        return AuxFilesystemReference(fs_path=mds_dir / match.group("path"))
    if protocol.startswith("filesystem+") and protocol.count("+") == 1:
        return AuxFilesystemReference(fs_path=EPath(f"{protocol.split('+')[1]}://{match.group('path')}"))
    if "+" in protocol:
        raise DatasetError(f"{where}: aux value {value!r}: the only prefix is filesystem+ (filesystem+msc://...)")
    return AuxDatasetReference(path=EPath(value))


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
        from .walk import traverse_node

        mds, node, where = self._bound("traverse")
        return traverse_node(mds, node, split_part, dict(_subflavors or {}), where)

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
        from .walk import Request, node_datasets

        mds, node, where = self._bound("get_datasets")
        multiplier = energon_multiplier(shuffle_over_epochs_multiplier, f"{where}: get_datasets: ")
        request = Request(training, worker_config, kwargs)
        return node_datasets(mds, node, request, split_part, subflavors, multiplier, subset, where)

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
        from .walk import _JOIN

        _, _, where = self._bound("get_datasets")
        raise DatasetError(f"{where}: a dataset of a join is read by its join only; {_JOIN}")


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


class MetadatasetV2(DatasetLoaderInterface):
    """A metadataset (``__class__: MetadatasetV2``) at ``path`` with its parsed ``splits``."""

    version = 2

    def __init__(self, path: Any, splits: dict[str, Any]):
        from ..epathlib import EPath

        self.path, self._config = EPath(path), splits
        self.splits = self._views(resolve=False)  # as written until post_initialize

    def _views(self, *, resolve: bool) -> dict[str, Any]:
        from .walk import view_node

        return {
            name: view_node(self, node, f"{self.path}: splits.{name}", resolve=resolve)
            for name, node in self._config.items()
        }

    def split(self, split_part: str) -> Any:
        """The mapping of split ``split_part`` (what the walk reads; ``splits[split_part]`` is its view)."""
        if split_part not in self._config:
            raise DatasetError(f"{self.path}: split {split_part!r} is not defined; it defines {sorted(self._config)}")
        return self._config[split_part]

    def post_initialize(self, mds_path: Any = None) -> None:
        """Check that every split's datasets exist (Energon checks when loading the file) and resolve the
        views in ``splits`` (paths beside the file, aux references, nested metadatasets loaded)."""
        self.splits = self._views(resolve=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, splits={self.splits!r})"

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        from .walk import traverse_node

        return traverse_node(self, self.split(split_part), split_part, dict(_subflavors or {}), f"splits.{split_part}")

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
        from .walk import Request, node_datasets

        multiplier = energon_multiplier(shuffle_over_epochs_multiplier, f"{self.path}: get_datasets: ")
        request = Request(training, worker_config, kwargs)
        where = f"{self.path}: splits.{split_part}"
        return node_datasets(self, self.split(split_part), request, split_part, subflavors, multiplier, subset, where)

    def prepare(self, split_part: str | None = None) -> tuple[Any, ...]:
        """Write the join index of each join of the split(s) not prepared yet (and of the metadatasets they
        include, each in its own ``.cache``); other files of this file's cache directory are removed
        (Energon's cleanup).  Returns ``()``, as Energon's."""
        from ...blend.join import prepare_joins
        from ...storage.path import as_path
        from .loader import load_metadataset_file
        from .walk import join_nodes

        found: list[Any] = []
        nested: list[Any] = []
        for name, node in self._config.items():
            if split_part is None or name == split_part:
                join_nodes(self, node, name, f"{self.path}: splits.{name}", found, nested)
        for target in dict.fromkeys(str(t) for t in nested):
            load_metadataset_file(target).prepare()
        prepare_joins(as_path(str(self.path)), found)
        return ()
