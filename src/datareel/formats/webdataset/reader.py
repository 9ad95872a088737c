"""Energon-prepared WebDataset directories (tar shards + ``.tar.idx`` + ``.nv-meta``).

Sample ``i`` of a split is found by arithmetic on the split's per-shard counts
(or, when samples are excluded by key, through the sorted excluded indices), then read
with one positioned read of ``[idx[i], idx[i+1])`` from its shard.  Opening
reads the metadata only (and checks each shard whose count is 0, which no read
would); a shard is opened and checked on its first use in
the process that reads it (DataLoader workers open their own after fork),
through the store of the dataset's URL (:func:`datareel.storage.files_for`: locally,
the process's bounded set of open files).  Where the store gains by it (a bucket), a
micro-batch's samples are fetched together (:meth:`prefetch`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DatasetError, OptionError
from ...sources.base import Source, file_check
from ...sources.dataset_code import DatasetCode
from ...sources.fieldmap import TypedFields, typed_fields
from ...sources.index_files import sample_range
from ...sources.source_info import dataset_path
from ...storage import HandleCache, files_for
from ...storage.path import as_path
from . import meta
from .blocks import BlockReads
from .column_reads import ColumnReads
from .decode import PartDecoder
from .explain import unprepared
from .members import group
from .naming import content_name
from .samples import SampleMaking
from .shards import ShardReads
from .splits import read_split
from .tarparse import iter_members, plain_members

READ_MANY_BYTES = 32 << 20
"""Bytes :meth:`WebDatasetSource.read_many` reads at most at once (big samples: video, large images)."""


class WebDatasetSource(SampleMaking, ShardReads, BlockReads, ColumnReads, Source):
    """One split of an Energon-prepared dataset directory.

    For ``CrudeWebdataset`` a sample is a dict of its parts decoded by extension
    (``{"__key__": ..., "txt": str, "json": dict, "jpg": tensor, ...}``); for a
    ``sample_type`` it is an instance of that class (:mod:`.typed`) with the
    fields ``field_map`` names.  Both carry ``__key__``, ``__restore_key__``,
    ``__subflavors__`` (the dataset's and the caller's; ``{}`` when none) and ``__sources__``
    (the :class:`~datareel.sources.source_info.SourceInfo` of the read, as Energon's).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        split: str | None = "train",
        image_decode: str | None = "torchrgb",
        decode: bool | str = True,
        subflavors: dict[str, Any] | None = None,
        split_config: str = "split.yaml",
        dataset_config: str = "dataset.yaml",
        name: str | None = None,
        trust_dataset_code: bool = False,
    ):
        self.root = as_path(root)
        self.prefetches = files_for(str(self.root)).prefetches
        if not meta.is_prepared(self.root):
            raise unprepared(self.root)
        info = meta.read_info(self.root)
        config = meta.read_dataset_yaml(self.root, dataset_config)
        where = str(self.root / meta.META / dataset_config)
        trusted = trust_dataset_code  # the user's word that the dataset's code may run (its sample_loader.py)
        self.typed: TypedFields | DatasetCode | None = typed_fields(config, where, self.root / meta.META, trusted)
        # dataset.yaml's own split_config names the split file, as Energon's configured keys win over defaults
        split_config = meta.configured_split(config, where, split_config)
        if split is None:  # every shard in .info.json order, nothing excluded (length indexing)
            self.split = meta.Split(name="*", shards=tuple(info))
        else:
            self.split = read_split(self.root, split, info, split_config)
        order = {shard: i for i, shard in enumerate(info)}
        info_starts = np.concatenate([[0], np.cumsum(list(info.values()))])  # (all shards + 1,)
        self._info_start = np.array([info_starts[order[s]] for s in self.split.shards], dtype=np.int64)
        if subflavors is not None and not isinstance(subflavors, dict):
            raise OptionError(f"subflavors={subflavors!r} must be a dict (name: value) or None")
        self.subflavors = {**(config.get("subflavors") or {}), **(subflavors or {})}  # typed_fields checked it
        if decode not in (True, False, "trusted"):
            raise OptionError(
                f"decode={decode!r} must be True (decode parts; pickles stay bytes), False (every part bytes) or "
                f"'trusted' (also unpickle pickle/pkl/pyd parts and torch.load .pth fully: only for data you trust)"
            )
        self.decoder = PartDecoder(image_decode, trusted=decode == "trusted") if decode else None
        self.shards = self.split.shards
        base = self._base = str(self.root)
        # plain strings (~1 µs a shard at open), by the names' normal form (read_info confined them)
        self._paths = [f"{base}/{meta.normal(shard)}" for shard in self.shards]
        self._pid: int | None = None  # the process _handles and _fetched belong to
        self._handles: HandleCache | None = None
        self._fetched: dict[tuple[str, int, int], bytes] = {}  # prefetched: one micro-batch's ranges
        self._blocks: dict[tuple[str, int, int], bytes] = {}  # prefetched: one micro-batch's blocks
        self._etag_seen: dict[str, str] = {}  # shard url -> its ETag when opened (the node cache's keys)
        self._ahead = None  # blocks fetched ahead in this process (.ahead)
        self.counts = np.array([info[s] for s in self.shards], dtype=np.int64)  # (S,)
        # what the split holds, not the folder's name: every copy shares one order (see .naming)
        self.name = name if name is not None else content_name(split or "all", self.split, self.counts)
        self._etags = meta.read_etags(self.root)  # shard -> ETag when indexed (prepared in a bucket), else {}
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])  # (S + 1,) first index of each shard
        self._first: list[int] = self.starts.tolist()  # the same as ints: each record's split index
        self._typed_parts = self.typed.parts if self.typed is not None else None  # the members records name
        self._dataset_path: Any = dataset_path(self.root)  # records' dataset_path, made here: workers get it
        # a 0-count shard is never read, so its first-use check would never run: check it now (index and
        # tar end), or a count of 0 written for a shard holding samples would drop them without a word
        for s in np.flatnonzero(self.counts == 0).tolist():
            self._check_shard(s)
        dropped = self._dropped_indices() if self.split.excluded_samples else None  # (D,) sorted, or None
        # kept samples before each dropped one (D,), non-decreasing: kept sample i is split index
        # i + (dropped ones at or before it) -- O(D) memory, whatever the split's size
        self._kept_before = None if dropped is None else dropped - np.arange(len(dropped), dtype=np.int64)
        self._size = int(self.starts[-1]) - (0 if dropped is None else len(dropped))
        if self._size == 0:
            raise DatasetError(f"split {split!r} of {self.root} holds no samples (after excludes)")

    def _dropped_indices(self) -> np.ndarray:
        """Split indices excluded by key (read once at open). -> int64[D], sorted"""
        dropped = []
        for s, shard in enumerate(self.shards):
            keys = self.split.excluded_samples.get(shard)
            if not keys:
                continue
            found = set()
            for local in range(int(self.starts[s + 1] - self.starts[s])):
                key = self._read_key(s, local)
                if key in keys:
                    dropped.append(int(self.starts[s]) + local)
                    found.add(key)
            if found != keys:
                missing = sorted(keys - found)
                raise DatasetError(
                    f"split {self.split.name!r}: exclude names samples {missing[:5]} of shard {shard!r}, which holds "
                    f"no such keys; fix the exclude entries (a typo would silently exclude nothing)"
                )
        return np.unique(np.array(dropped, dtype=np.int64))

    def _split_indices(self, indices: np.ndarray) -> np.ndarray:
        """Split indices (excluded samples counted) of samples ``indices``. int64[k] -> int64[k]"""
        if len(indices) and not (0 <= indices.min() and indices.max() < self._size):
            raise IndexError(
                f"samples {indices.tolist()[:5]}... are out of range for {self.name} ({self._size} samples)"
            )
        if self._kept_before is None:
            return indices
        return indices + np.searchsorted(self._kept_before, indices, side="right")

    # -- Source -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._size

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, index in shard)`` of sample ``index`` of this split."""
        if not 0 <= index < self._size:
            raise IndexError(f"sample {index} is out of range for {self.name} ({self._size} samples)")
        g = int(self._split_indices(np.array([index], dtype=np.int64))[0])
        s = int(np.searchsorted(self.starts, g, side="right")) - 1
        return s, g - int(self.starts[s])

    def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`locate`. indices: int64[k] -> (shard numbers int64[k], index in shard int64[k])."""
        g = self._split_indices(np.asarray(indices, dtype=np.int64))
        s = np.searchsorted(self.starts, g, side="right") - 1
        return s, g - self.starts[s]

    def byte_sizes(self, indices: np.ndarray) -> np.ndarray:
        """Bytes of each sample's tar members (headers included). indices: int64[k] -> int64[k]."""
        shard, local = self.locate_many(indices)
        out = np.empty(len(shard), dtype=np.int64)
        for s in np.unique(shard).tolist():
            idx = self._index(s)
            mask = shard == s
            out[mask] = idx[local[mask] + 1].astype(np.int64) - idx[local[mask]].astype(np.int64)
            if (out[mask] < 0).any():
                bad = int(local[mask][out[mask] < 0][0])
                sample_range(idx, bad, lambda s=s: f"{self._paths[s]}.idx")  # raises, naming it
        return out

    def global_indices(self, indices: np.ndarray) -> np.ndarray:
        """Sample numbers in ``.info.json`` shard order (what a length index is keyed by)."""
        shard, local = self.locate_many(indices)
        return self._info_start[shard] + local

    def length_index_path(self) -> Path:
        return self.root / meta.META / "lengths.npy"

    def length_index_check(self) -> dict[str, Any]:
        """What a length index must match: every shard's sample count, byte size and a digest of its ends."""
        info = meta.read_info(self.root)
        return {shard: file_check(self.root / str(meta.normal(shard)), count) for shard, count in info.items()}

    def key(self, index: int) -> str:
        s, local = self.locate(index)
        return self._read_key(s, local) or ""

    def read_raw(self, index: int) -> tuple[str, dict[str, bytes], str]:
        """``(key, {part: bytes}, where)`` of sample ``index``."""
        return self._read_raw(*self.locate(index))

    def _read_raw(self, s: int, local: int) -> tuple[str, dict[str, bytes], str]:
        """``(key, {part: bytes}, where)`` of sample ``local`` of shard ``s``."""
        start, stop = self._range(s, local)
        where = f"shard {self._paths[s]}"
        view = memoryview(self._pread(s, start, stop))
        key, parts = group(iter_members(view, where, start), view, start, (where, local, start, stop))
        return key, parts, f"{where} key {key!r}"

    def read(self, index: int) -> Any:
        s, local = self.locate(index)
        return self._sample(s, local, *self._read_raw(s, local))

    _columns_base = True  # read_columns stands for this class's read(); a subclass's own hook turns it off

    def read_many(self, indices: np.ndarray, block: int = 1) -> list[Any]:
        """Samples ``indices`` (int64[k]) read together: located in one numpy call, one read each, their
        tar headers checked a round at a time (:func:`~.tarparse.plain_members`). ``None`` for a sample
        this path leaves to :meth:`read` (a store that prefetches, an index or shard that fails its check,
        members other than plain ones, damage, samples past the first :data:`READ_MANY_BYTES`), which reads
        it or raises what is wrong with it. ``block=k`` (k > 1): read the samples' blocks of ``k``, one
        read each, keeping the blocks' other samples for later reads (:mod:`.blocks`)."""
        indices = np.asarray(indices, dtype=np.int64)
        out: list[Any] = [None] * len(indices)
        if block > 1 and type(self).read is WebDatasetSource.read:
            return self.read_blocks(indices, int(block))
        if self.prefetches or not len(indices) or type(self).read is not WebDatasetSource.read:
            return out  # read() takes a prefetched micro-batch's bytes; a subclass's own read() is what it reads with
        rows = np.flatnonzero((indices >= 0) & (indices < self._size))  # (r,) out of range: read() names it
        shard, local = self.locate_many(indices[rows])  # (r,), (r,)
        blobs, at, ends, read, spans, offset = [], [], [], [], [], 0
        cache = self._cache()
        with cache.held():  # no handle is closed under us: read it directly
            for j, s, i in zip(range(len(rows)), shard.tolist(), local.tolist()):
                try:
                    handle = cache.get(self._paths[s], lambda s=s: self._open_shard(s))
                    start, stop = sample_range(handle.index, i, lambda s=s: f"{self._paths[s]}.idx")
                    blob = handle.read_range(start, stop)
                except (DatasetError, OSError, IndexError):
                    continue  # read() raises it, under the error policy
                if len(blob) != stop - start:
                    continue  # truncated since it was opened: read() says so
                if offset + len(blob) > READ_MANY_BYTES and blobs:
                    break  # big samples: the rest are read one by one, as they are used
                blobs.append(blob)
                at.append(offset)
                offset += len(blob)
                ends.append(offset)
                read.append(j)
                spans.append((start, stop))
        data = b"".join(blobs)
        for j, (start, stop), members in zip(read, spans, plain_members(data, at, ends)):
            if members is None:
                continue
            s, i = int(shard[j]), int(local[j])
            where = f"shard {self._paths[s]}"
            try:
                key, parts = group(members, data, 0, (where, i, start, stop))
                out[int(rows[j])] = self._sample(s, i, key, parts, f"{where} key {key!r}")
            except Exception:
                continue  # mixed keys, a part twice, a part that does not decode: read() raises it
        return out

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "split": self.split.name,
            "shards": list(self.shards),
            "counts": np.diff(self.starts).tolist(),
            "excluded": {s: sorted(k) for s, k in self.split.excluded_samples.items()},
            "sample_type": self.typed.sample_type if self.typed else "crude",
        }

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pid": None, "_handles": None, "_fetched": {}, "_blocks": {}, "_ahead": None}
