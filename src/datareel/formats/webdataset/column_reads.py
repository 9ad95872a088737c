"""A micro-batch of a WebDataset split read as columns: one positioned read per run of adjacent samples into
one buffer, every tar header parsed at once (:func:`~.columns.plain_columns`), and per key (``__key__``,
``__restore_key__``, each part, ``__subflavors__``, ``__sources__``) the list of the samples' values, in the
samples' order: what the per-sample path's samples give, key by key.

``None`` wherever this path does not take the whole micro-batch: a store that prefetches (a bucket: its
reads go through :meth:`~.shards.ShardReads.prefetch`), a subclass with its own ``read``, typed samples, an
index entry or shard that fails its check, a short read, members :func:`~.columns.plain_columns` leaves, a
part that does not decode. The caller then reads the samples one by one, which raises what is wrong with
any of them under the error policy, as before.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...sources.source_info import SourceInfo, make_source_info
from .columns import plain_columns

if TYPE_CHECKING:
    from ...storage import Handle, HandleCache

COLUMN_BYTES = 32 << 20
"""A micro-batch whose samples hold more bytes than this is read sample by sample (video, large images)."""


class ColumnReads:
    """The columnar path of :class:`~datareel.formats.webdataset.reader.WebDatasetSource` (a mixin over
    :class:`~.shards.ShardReads` and the reader, whose attributes and methods it uses)."""

    prefetches: bool
    typed: Any
    decoder: Any
    subflavors: dict[str, Any]
    shards: list[str]
    root: Any
    _paths: list[str]
    _first: list[int]
    _dataset_path: Any
    _columns_base: bool  # set by the reader class whose per-sample hooks (_HOOKS) the columns stand for

    if TYPE_CHECKING:  # from ShardReads and the reader

        def __len__(self) -> int:
            raise NotImplementedError

        def read(self, index: int) -> Any:
            raise NotImplementedError

        def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            raise NotImplementedError

        def _cache(self) -> HandleCache:
            raise NotImplementedError

        def _open_shard(self, s: int) -> Handle:
            raise NotImplementedError

    def read_columns(self, indices: np.ndarray) -> dict[str, list[Any]] | None:
        """Samples ``indices`` (int64[k]) as columns, key by key, or ``None`` (see the module)."""
        if not _plain_class(type(self)):
            return None  # a subclass's own per-sample hook is what it reads with
        return _read_columns(self, np.asarray(indices, dtype=np.int64))


_HOOKS = ("read", "locate", "locate_many", "_split_indices", "_read_raw", "_sample", "_sources")
"""What the per-sample path reads a sample with; the columns stand for them as the reader defines them."""
_PLAIN: dict[type, bool] = {}


def _plain_class(cls: type) -> bool:
    """Whether ``cls`` keeps every one of :data:`_HOOKS` as the reader class defines it (known per class)."""
    known = _PLAIN.get(cls)
    if known is None:
        base = next(c for c in cls.__mro__ if "_columns_base" in vars(c))
        known = _PLAIN[cls] = all(getattr(cls, name) is getattr(base, name) for name in _HOOKS)
    return known


def _read_columns(source: ColumnReads, indices: np.ndarray) -> dict[str, list[Any]] | None:
    """:meth:`ColumnReads.read_columns`."""
    if source.prefetches or source.typed is not None or not len(indices):
        return None
    if indices.min() < 0 or indices.max() >= len(source):
        return None  # read() names it
    shard, local = source.locate_many(indices)  # (k,), (k,)
    shards, local_list = shard.tolist(), local.tolist()
    paths = source._paths
    cache = source._cache()
    k = len(shards)
    begin, end = [0] * k, [0] * k  # each sample's bytes in the file
    with cache.held():  # no handle is closed under us: read it directly
        handles: dict[int, Any] = {}
        for s in set(shards):
            try:
                handles[s] = cache.get(paths[s], lambda s=s: source._open_shard(s))
            except Exception:
                return None  # the per-sample read raises it, under the error policy
        try:
            for j, s, i in zip(range(k), shards, local_list):
                idx = handles[s].index  # uint64[count + 1]; i >= 0
                start, stop = int(idx[i]), int(idx[i + 1])
                if not start <= stop <= int(idx[-1]):
                    return None  # a damaged index entry: sample_range names it
                begin[j], end[j] = start, stop
        except IndexError:
            return None  # past the index (or a closed handle's empty one): read() names it
        data = _read(handles, shards, begin, end)
    if data is None:
        return None
    lengths = np.array(end, dtype=np.int64) - np.array(begin, dtype=np.int64)  # (k,)
    stops = np.cumsum(lengths)  # (k,) each sample's end in the buffer
    found = plain_columns(data, stops - lengths, stops)
    if found is None:
        return None
    keys, names = found.keys, source.shards
    if any(part[:2] == "__" for part in found.parts):
        return None  # a part named like a sample's own keys: the per-sample path says what it makes of it
    out: dict[str, list[Any]] = {
        "__key__": keys,
        "__restore_key__": [("Webdataset", names[s], i) for s, i in zip(shards, local_list)],
    }
    decode = source.decoder
    where = f"shard {paths[shards[0]]} key {keys[0]!r}"  # what a decoder's warning names (once per part)
    for p, part in enumerate(found.parts):
        column = [data[a : a + n] for a, n in zip(found.offsets[:, p].tolist(), found.sizes[:, p].tolist())]
        if decode is not None:
            try:
                column = [decode(part, value, where) for value in column]
            except Exception:
                return None  # the per-sample read names the sample, under the error policy
        out[part] = column
    subflavors = source.subflavors
    out["__subflavors__"] = [{**subflavors} for _ in keys]
    out["__sources__"] = _records(source, shards, local_list, keys, found.parts)
    return out


def _read(handles: dict[int, Any], shards: list[int], begin: list[int], end: list[int]) -> bytes | None:
    """Sample ``j``'s bytes ``[begin[j], end[j])`` of shard ``shards[j]``, one after the other in one buffer,
    one read per run of adjacent samples; ``None`` if a read failed or came short, or the bytes would pass
    :data:`COLUMN_BYTES`."""
    total = sum(end) - sum(begin)
    if total > COLUMN_BYTES:
        return None
    fds = {s: handle.fd for s, handle in handles.items()}
    blobs: list[bytes] = []
    run_shard, run_start, run_stop = shards[0], begin[0], begin[0]
    try:
        for s, start, stop in zip(shards, begin, end):
            if s == run_shard and start == run_stop:
                run_stop = stop  # adjacent to the run: one read
                continue
            blobs.append(_pread(handles, fds, run_shard, run_start, run_stop))
            run_shard, run_start, run_stop = s, start, stop
        blobs.append(_pread(handles, fds, run_shard, run_start, run_stop))
    except Exception:
        return None  # the per-sample read raises it, under the error policy
    data = b"".join(blobs) if len(blobs) > 1 else blobs[0]
    return data if len(data) == total else None  # a read comes short or whole: the sum says which


def _pread(handles: dict[int, Any], fds: dict[int, int], s: int, start: int, stop: int) -> bytes:
    fd = fds[s]
    return os.pread(fd, stop - start, start) if fd >= 0 else handles[s].read_range(start, stop)


def _records(
    source: ColumnReads, shards: list[int], local: list[int], keys: list[str], parts: tuple[str, ...]
) -> list[tuple[SourceInfo]]:
    """Each sample's ``__sources__`` (as :meth:`~.reader.WebDatasetSource._sources` makes it)."""
    path = source._dataset_path
    names = source.shards
    first = source._first
    files = list(zip(*[[f"{key}.{part}" for key in keys] for part in parts]))  # (k,) of (P,)
    return [
        (make_source_info(path, first[s] + i, names[s], file_names),) for s, i, file_names in zip(shards, local, files)
    ]
