"""Auxiliary datasets of a metadataset leaf (Energon's ``aux:``): random access by key for cookers.

    splits:
      train:
        path: ds1                      # the primary dataset: the reel decides which of its samples
        aux:
          pkl_source: ds2              # a prepared dataset (WebDataset dir or .jsonl), by "<key>.<part>"
          fs_source: filesystem://.    # files under a directory, by relative path
          media: filesystem+msc://profile/bucket/dir

:func:`attach_aux` gives the leaf's source the stores (:mod:`.stores`): each sample it
reads carries them (under ``__aux__``, with the store of its own dataset as the primary one) and a
:class:`~datareel.sources.source_info.SourceInfo` of its own read in ``__sources__``.  A cooker takes
them as keyword arguments by name (:func:`datareel.energon.task_encoder.cooking.bind_cookers`) and reads
whatever keys it computes, in the worker that cooks the sample.  The order stays the primary source's:
aux reads are lookups, never positions of the reel, so resuming on any topology reads the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import DatasetError, OptionError
from ..sources.base import MappedSource, Source
from ..sources.source_info import SourceInfo, dataset_path
from ..storage import join
from .stores import JsonlFileStore, SystemFileStore, WebdatasetFileStore

__all__ = ["AUX_KEY", "AuxContext", "AuxSource", "attach_aux", "open_store"]

AUX_KEY = "__aux__"
FILESYSTEM = ("filesystem://", "filesystem+")


def open_store(path: str, base_dir: Any) -> Any:
    """The file store an ``aux`` entry names, relative paths resolved against ``base_dir`` (the
    metadataset's directory, local or a URL): ``filesystem://DIR`` (or ``filesystem+msc://...``) is files
    under a directory; any other path is a prepared dataset (a WebDataset directory, a ``.jsonl``)."""
    if not isinstance(path, str) or not path:
        raise OptionError(f"aux entry {path!r} must be a path: a prepared dataset or filesystem://DIR")
    base = str(base_dir)
    if path.startswith("filesystem://"):
        return SystemFileStore(join(base, path[len("filesystem://") :] or ".").rstrip("/") or "/")
    if path.startswith("filesystem+"):
        return SystemFileStore(path[len("filesystem+") :].rstrip("/"))
    url = join(base, path).rstrip("/")
    if url.endswith(".jsonl"):
        return JsonlFileStore(url)
    from ..formats.webdataset import meta
    from ..storage.path import as_path

    if not meta.is_prepared(as_path(url)):
        raise DatasetError(
            f"aux dataset {path!r} ({url}) is not a prepared dataset (no .nv-meta/.info.json); prepare it, or name "
            f"a directory of plain files as filesystem://{path}"
        )
    return WebdatasetFileStore(url)


class AuxContext:
    """What a sample of an aux-attached source carries to its cooker: the named stores and the primary one."""

    __slots__ = ("primary", "stores")

    def __init__(self, stores: dict[str, Any], primary: Any):
        self.stores, self.primary = stores, primary

    def __getstate__(self) -> tuple[dict[str, Any], Any]:
        return self.stores, self.primary

    def __setstate__(self, state: tuple[dict[str, Any], Any]) -> None:
        self.stores, self.primary = state

    def __repr__(self) -> str:
        return f"AuxContext({sorted(self.stores)}, primary={self.primary})"


def _innermost(source: Source, index: int) -> tuple[Source, int]:
    """The source that reads sample ``index`` of ``source`` (through views and filters), and its index there."""
    while isinstance(source, MappedSource):
        index = int(source._map(np.array([index], dtype=np.int64))[0])
        source = source.base
    return source, index


class AuxSource(MappedSource):
    """``base`` with auxiliary stores: the same samples in the same order (see the module docstring)."""

    def __init__(self, base: Source, stores: dict[str, Any], paths: dict[str, str]):
        self.base, self.name, self.paths = base, base.name, dict(paths)
        root = getattr(_innermost(base, 0)[0], "root", None) if len(base) else None
        primary = None
        if root is not None:
            primary = WebdatasetFileStore(str(root))
        self.context = AuxContext(dict(stores), primary)

    def __len__(self) -> int:
        return len(self.base)

    def _map(self, indices: np.ndarray) -> np.ndarray:
        return indices

    def read(self, index: int) -> Any:
        return self._carry(index, self.base.read(index))

    def read_many(self, indices: np.ndarray) -> list[Any]:
        out = self.base.read_many(indices)
        return [None if s is None else self._carry(int(i), s) for i, s in zip(np.asarray(indices).tolist(), out)]

    def _carry(self, index: int, sample: Any) -> Any:
        """``sample`` (a crude dict) with the stores and, if it has none, the record of its own read."""
        if not isinstance(sample, dict):
            raise DatasetError(
                f"aux datasets are for crude samples (dicts a cooker turns into typed ones); {self.name} gives "
                f"{type(sample).__name__} samples: use a CrudeWebdataset for the primary dataset"
            )
        out = type(sample)(sample) if type(sample) is not dict else dict(sample)
        out[AUX_KEY] = self.context
        if not out.get("__sources__"):
            info = primary_info(self.base, index, out)
            if info is not None:
                out["__sources__"] = (info,)
        return out

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "aux": self.paths}

    def __getattr__(self, name: str) -> Any:  # the primary source's own attributes (root, subflavors, ...)
        if name.startswith("_") or name in ("base", "context", "paths"):
            raise AttributeError(name)
        return getattr(self.base, name)


def primary_info(source: Source, index: int, sample: Mapping[str, Any]) -> SourceInfo | None:
    """The record of sample ``index``'s own read (dataset, index there, shard, its files), where the source
    reading it is a prepared WebDataset; ``None`` otherwise."""
    inner, local_index = _innermost(source, index)
    if not hasattr(inner, "locate") or not hasattr(inner, "shards"):
        return None
    shard, local = inner.locate(local_index)
    key = sample.get("__key__", "")
    parts = tuple(f"{key}.{part}" for part in sample if not (part.startswith("__") and part.endswith("__")))
    return SourceInfo(
        dataset_path=getattr(inner, "_dataset_path", None) or dataset_path(inner.root),  # the reader's, made once
        index=int(inner.starts[shard]) + local,
        shard_name=str(inner.shards[shard]),
        file_names=parts,
    )


def attach_aux(source: Source, aux: Mapping[str, str] | None, base_dir: Any) -> Source:
    """``source`` with the auxiliary datasets ``aux`` (name -> path, relative to ``base_dir``, the directory of
    the metadataset that names them); ``source`` itself when ``aux`` is empty."""
    if not aux:
        return source
    if not isinstance(aux, Mapping):
        raise OptionError(f"aux: {aux!r} must be a mapping of name -> dataset path (or filesystem://DIR)")
    reserved = {"primary", "cache"} & set(aux)
    if reserved:
        raise OptionError(
            f"aux names {sorted(reserved)} are reserved (a cooker gets its own dataset as 'primary' and the loader's "
            f"pool as 'cache'); rename them"
        )
    stores = {str(name): open_store(path, base_dir) for name, path in aux.items()}
    return AuxSource(source, stores, {str(k): str(v) for k, v in aux.items()})
