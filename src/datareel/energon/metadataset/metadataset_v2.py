"""Energon's ``megatron.energon.metadataset.metadataset_v2``: ``MetadatasetV2`` — a metadataset's splits as
Energon reads them for ``get_datasets`` (the flattened leaves of a split, weights multiplied down to
absolute ones, repetitions multiplied, subflavors merged outer-over-inner, multipliers combined by
Energon's rule, subsets merged) and for ``traverse`` (leaf paths, split parts, aux paths, subflavors).

The reel itself is built from the same file by :mod:`datareel.blend.metadataset` (what
``get_train_dataset`` reads); this module answers the questions Energon's objects answer.  ``prepare``
writes the join indexes a split's joins read
(:func:`datareel.blend.join.prepare_joins`).  ``AuxFilesystemReference`` / ``AuxDatasetReference``
are the two kinds of ``aux:`` entry.

Energon's legacy ``Metadataset`` (v1) is here too (:mod:`.metadataset` gives it under Energon's path), and
:func:`load_metadataset_file`, which reads either kind.

``MetadatasetV2.splits`` holds each split as Energon's object of the same name gives it —
``MetadatasetBlend(subset, blend=[BlendDatasetReference(path, split_part, subflavors, aux, weight, ...)])``,
``MetadatasetBlendEpochized``, ``MetadatasetJoin``, ``DatasetReference`` — with the values Energon gives after
``post_initialize`` (paths as :class:`~datareel.energon.epathlib.EPath` beside the file, ``aux`` entries as
``AuxDatasetReference`` / ``AuxFilesystemReference``, ``weight`` / ``repetitions`` as written, default 1.0 / 1).
They are a read-only view (:mod:`.views`): ``get_datasets`` / ``traverse`` of a split or of one of
its entries go through the same walk over the file's mapping, so a changed field would be read by nothing
and an assignment is refused, naming the YAML key to edit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ...blend.join import prepare_joins
from ...errors import DatasetError
from ...formats.metadataset.document import checked, legacy_split
from ...formats.metadataset.walk import file_key
from ...formats.metafiles import load_file
from ...storage.path import as_path
from ..epathlib import EPath
from ..multiplier import energon_multiplier
from .loader_interface import DatasetLoaderInterface, LoadedDatasetList, TraversedDatasetReference
from .values import AuxDatasetReference as AuxDatasetReference
from .values import AuxFilesystemReference as AuxFilesystemReference
from .values import DatasetSubset as DatasetSubset
from .values import aux_reference as aux_reference
from .values import merge_subset as merge_subset
from .values import parse_subset as parse_subset
from .views import BlendDatasetReference as BlendDatasetReference
from .views import BlendEpochizedDatasetReference as BlendEpochizedDatasetReference
from .views import BlendEpochizedJoinDatasetReference as BlendEpochizedJoinDatasetReference
from .views import BlendJoinDatasetReference as BlendJoinDatasetReference
from .views import DatasetReference as DatasetReference
from .views import JoinDatasetReference as JoinDatasetReference
from .views import MetadatasetBlend as MetadatasetBlend
from .views import MetadatasetBlendEpochized as MetadatasetBlendEpochized
from .views import MetadatasetJoin as MetadatasetJoin
from .views import Subset as Subset
from .views import view_node
from .walk import Request, join_nodes, node_datasets, traverse_node

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
    "Metadataset",
    "MetadatasetBlend",
    "MetadatasetBlendEpochized",
    "MetadatasetJoin",
    "MetadatasetV2",
    "Subset",
    "load_metadataset_file",
]


_ENTERED: ContextVar[tuple[str, ...]] = ContextVar("entered", default=())
"""The files whose ``post_initialize`` or ``prepare`` is running (each goes into the metadatasets it includes)."""


@contextmanager
def _entered(path: Any) -> Iterator[None]:
    """Within the ``post_initialize`` or ``prepare`` of the file at ``path``: one that is already running is a
    cycle of files, named (Energon recurses until Python's recursion limit)."""
    key, running = file_key(path), _ENTERED.get()
    if key in running:
        raise DatasetError(f"{path}: metadatasets include each other in a cycle: {list(running)}")
    token = _ENTERED.set(running + (key,))
    try:
        yield
    finally:
        _ENTERED.reset(token)


class MetadatasetV2(DatasetLoaderInterface):
    """A metadataset (``__class__: MetadatasetV2``) at ``path`` with its parsed ``splits``."""

    version = 2

    def __init__(self, path: Any, splits: dict[str, Any]):
        self.path, self._config = EPath(path), splits
        self.splits = self._views(resolve=False)  # as written until post_initialize

    def _views(self, *, resolve: bool) -> dict[str, Any]:
        return {name: view_node(self, node, name, resolve=resolve) for name, node in self._config.items()}

    def nested(self, path: Any) -> MetadatasetV2:
        """The metadataset at ``path`` that an entry of this one names (either kind, unchecked), as
        :func:`load_metadataset_file` loads it: how ``post_initialize`` resolves an entry naming another file (the
        facade's walks follow such entries themselves)."""
        return load_metadataset_file(path)

    def split(self, split_part: str) -> Any:
        """The mapping of split ``split_part`` (what the walk reads; ``splits[split_part]`` is its view)."""
        if split_part not in self._config:
            raise DatasetError(f"{self.path}: split {split_part!r} is not defined; it defines {sorted(self._config)}")
        return self._config[split_part]

    def post_initialize(self, mds_path: Any = None) -> None:
        """Check that every split's datasets exist (Energon checks when loading the file) and resolve the
        views in ``splits`` (paths beside the file, aux references, nested metadatasets loaded)."""
        with _entered(self.path):
            self.splits = self._views(resolve=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, splits={self.splits!r})"

    def traverse(
        self, mds_path: Any = None, *, split_part: str, _subflavors: dict[str, Any] | None = None
    ) -> list[TraversedDatasetReference]:
        where = f"splits.{split_part}"
        return traverse_node(self, self.split(split_part), where, split_part, dict(_subflavors or {}))

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
        multiplier = energon_multiplier(shuffle_over_epochs_multiplier, f"{self.path}: get_datasets: ")
        request = Request(training, worker_config, kwargs)
        where = f"splits.{split_part}"
        return node_datasets(self, self.split(split_part), where, request, split_part, subflavors, multiplier, subset)

    def prepare(self, split_part: str | None = None) -> tuple[Any, ...]:
        """Write the join index of each join of the split(s) not prepared yet (and of the metadatasets they
        include, each in its own ``.cache``); other files of this file's cache directory are removed
        (Energon's cleanup).  Returns ``()``, as Energon's."""
        found: list[Any] = []
        included: list[Any] = []
        for name, node in self._config.items():
            if split_part is None or name == split_part:
                join_nodes(self, node, name, found, included)
        with _entered(self.path):
            for target in dict.fromkeys(str(t) for t in included):
                load_metadataset_file(target).prepare()
        prepare_joins(as_path(str(self.path)), found)
        return ()


class Metadataset(MetadatasetV2):
    """A legacy metadataset at ``path``: each split a ``datasets`` list blended by ``weight``."""

    version = 1

    def __init__(self, path: Any, splits: dict[str, Any]):
        super().__init__(path, {name: legacy_split(node, path, name, implicit=True) for name, node in splits.items()})


def metadataset_of(config: Any, path: Any) -> MetadatasetV2:
    """A metadataset's parsed document ``config`` (read from ``path``) as the class it names, checked."""
    config = checked(config, path)
    return _CLASSES[config.get("__class__", "Metadataset")](path, config["splits"])  # Energon's default type


def load_metadataset_file(path: Any) -> MetadatasetV2:
    """The metadataset at ``path`` (local or a URL), unchecked (see :meth:`MetadatasetV2.post_initialize`)."""
    path = EPath(path)
    return metadataset_of(load_file(as_path(str(path)), "metadataset", fix="fix the metadataset YAML"), path)


_CLASSES = {"MetadatasetV2": MetadatasetV2, "Metadataset": Metadataset}
