"""Shards of a prepared WebDataset as its reader opens them: through the store of the dataset's URL
(:func:`datareel.storage.files_for`), each checked on its first use in a process (it exists; its ETag is
the one recorded, where one was; its index agrees with ``.info.json`` and the tar still ends where
indexed), its handle kept where the store says (locally, the process's bounded set of open files), and
read by byte range: a micro-batch's ranges fetched together where the store gains by it (a bucket)."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import DatasetChangedError, DatasetError
from ...sources.index_files import read_index, sample_range
from ...storage import Files, HandleCache, NotFound, files_for
from ...storage.handles import Handle
from . import meta
from .tarparse import BLOCK, iter_members, split_name


class ShardReads:
    """The shard I/O of :class:`~datareel.formats.webdataset.reader.WebDatasetSource` (a mixin: the reader
    sets the attributes below when it opens the dataset)."""

    root: Any
    shards: tuple[str, ...]
    counts: np.ndarray
    prefetches: bool
    _base: str
    _paths: list[str]
    _etags: dict[str, str]
    _pid: int | None
    _handles: HandleCache | None
    _fetched: dict[tuple[str, int, int], bytes]
    _blocks: dict[tuple[str, int, int], bytes]
    _etag_seen: dict[str, str]
    _ahead: Any

    if TYPE_CHECKING:  # the block path (.blocks.BlockReads)

        def prefetch_blocks(self, indices: np.ndarray, k: int) -> None: ...

    def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    # -- per-shard checks (lazy: on a shard's first use in a process) ---------------------------------
    def check(self, progress: bool = False) -> None:
        """Check every shard now (as each read would on first use): it exists, its index agrees with
        ``.info.json``, and the tar still ends where indexed. Raises the read's :class:`DatasetError`."""
        from tqdm import tqdm

        for s in tqdm(range(len(self.shards)), unit="shard", desc="checking", disable=not progress):
            self._check_shard(s)

    def _check_shard(self, s: int) -> None:
        """Shard ``s`` checked now, as its first read would (whatever handle of it this process holds), and
        its handle kept for the reads."""
        self._cache().put(self._paths[s], self._open_shard(s))

    def _checked(self, s: int, size: int, idx: np.ndarray, tail: Callable[[int], bytes]) -> None:
        """Shard ``s`` of ``size`` bytes agrees with its index ``idx`` (``tail(end)``: its 512 bytes at ``end``)."""
        path = self._paths[s]
        count = int(self.counts[s])
        if len(idx) != count + 1:
            raise DatasetChangedError(
                f"index {path}.idx holds {len(idx) - 1} samples but {meta.META}/.info.json says {count}; "
                f"the dataset changed since it was prepared: re-run `datareel prepare`"
            )
        end = int(idx[-1])
        end_blocks = tail(end) if end + BLOCK <= size else b""
        if size < end or len(end_blocks) < BLOCK or end_blocks.count(0) != BLOCK:
            raise DatasetChangedError(
                f"shard {path} ({size} bytes) no longer matches its index, which ends the last sample "
                f"at byte {end} before the tar's end blocks: the shard is truncated or changed since "
                f"it was prepared; re-run `datareel prepare`"
            )

    def _open_shard(self, s: int) -> Handle:
        """Shard ``s`` opened and checked (it exists; its ETag is the one recorded, where one was; its index
        and tar end agree) -> its handle: the opened shard and its index."""
        url = self._paths[s]
        try:
            opened = self._store().open(url)
        except NotFound:
            raise NotFound(f"shard {url} is missing (listed in {meta.META}/.info.json)") from None
        try:
            try:
                found = opened.info()
            except NotFound:
                raise NotFound(f"shard {url} is missing (listed in {meta.META}/.info.json)") from None
            recorded = self._etags.get(self.shards[s])
            if found.etag is not None:  # the node cache keys blocks by it
                self._etag_seen[url] = found.etag.strip('"')
            if recorded is not None and found.etag is not None and found.etag.strip('"') != recorded.strip('"'):
                raise DatasetChangedError(
                    f"shard {url} was replaced since it was prepared: its ETag is {found.etag!r}, {meta.META}/"
                    f"{meta.ETAGS} recorded {recorded!r}; re-run `datareel prepare {self.root} --overwrite`"
                )
            idx = read_index(f"{url}.idx")
            self._checked(s, found.size, idx, lambda end: opened.read_range(end, end + BLOCK))
        except BaseException:
            opened.close()
            raise
        return Handle(opened, idx)

    # -- lazy per-process handles -----------------------------------------------------------------
    def _store(self) -> Files:
        return files_for(self._base)

    def _cache(self) -> HandleCache:
        """Where this source keeps its shards' handles in this process, as its store says: locally the
        process's bounded set of open files; in a bucket for the source's life in the process (an index, 8
        bytes per sample; no descriptor), where a shard whose check failed fails again at once, without
        asking the store again."""
        if self._pid != os.getpid() or self._handles is None:  # first use in this process (a worker after fork)
            self._pid, self._handles, self._fetched = os.getpid(), self._store().handle_cache(), {}
            self._blocks, self._ahead = {}, None
        return self._handles

    def _open_first_used(self, shards: np.ndarray) -> None:
        """Open and check, concurrently where the store gains by it, the shards of ``shards`` (int64[k]) new to
        this process. Never raises: a failure is remembered by the handle cache and raised on read."""
        cache = self._cache()
        first_use = [s for s in np.unique(shards).tolist() if cache.peek(self._paths[s]) is None]
        self._store().each(self._index, first_use)

    def _use(self, s: int) -> AbstractContextManager[Handle]:
        """Shard ``s``'s handle, opened and checked on its first use in this process (:meth:`_open_shard`),
        pinned while the ``with`` block runs: another thread's eviction closes it only when the block ends."""
        return self._cache().use(self._paths[s], lambda: self._open_shard(s))

    def _index(self, s: int) -> np.ndarray:
        """Shard ``s``'s offsets (checked on first use in this process), taken while its handle is pinned (the
        array stays valid after). -> uint64[count + 1]"""
        with self._use(s) as handle:
            return handle.index

    def _range(self, s: int, local: int) -> tuple[int, int]:
        return sample_range(self._index(s), local, lambda: f"{self._paths[s]}.idx")

    def prefetch(self, indices: np.ndarray, block: int = 1) -> None:
        """Where the store gains by it (a bucket): fetch the samples' ranges together (coalesced, concurrent
        GETs) for :meth:`_pread`. Shards new to this process are checked concurrently first; a sample whose
        shard or index is broken is left out here and fails (or is substituted) when it is read, as without
        prefetching. ``block=k`` (k > 1): fetch the samples' blocks of ``k`` instead, one range each, for
        ``read_many(indices, block=k)`` (:mod:`.blocks`)."""
        if not self.prefetches:
            return
        if block > 1:
            self.prefetch_blocks(indices, int(block))
            return
        cache = self._cache()
        self._fetched = {}  # only this micro-batch's bytes are held
        try:
            shard, local = self.locate_many(np.asarray(indices, dtype=np.int64))
        except IndexError:
            return
        files = self._store()
        self._open_first_used(shard)
        wanted = []
        for s, i in zip(shard.tolist(), local.tolist()):
            if cache.peek(self._paths[s]) is not None:  # none: its check failed, read() names it
                try:
                    wanted.append((self._paths[s], *sample_range(self._index(s), i, lambda: "")))
                except (DatasetError, OSError):
                    pass  # a damaged index entry: read() names it
        self._fetched = files.read_ranges(wanted)

    def _pread(self, s: int, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of shard ``s``: prefetched with its micro-batch, else read now."""
        url = self._paths[s]
        self._cache()  # first use in this process: its per-process state made
        blob = self._fetched.pop((url, start, stop), None)
        if blob is None:
            with self._use(s) as handle:  # no other thread closes it while it is read
                try:
                    blob = handle.read_range(start, stop)
                except DatasetError as exc:  # the same kind of error (a store's failure stays one), with the sample
                    local = int(np.searchsorted(handle.index, start, side="right")) - 1
                    raise type(exc)(f"{exc} (reading sample {local} of the shard)") from exc.__cause__
        if len(blob) != stop - start:  # as a shard found truncated when opened: the dataset changed
            raise DatasetChangedError(
                f"shard {url}: read {len(blob)} of {stop - start} bytes at {start}; "
                f"the shard was truncated after it was opened; re-run `datareel prepare`"
            )
        return blob

    def _read_key(self, s: int, local: int) -> str | None:
        start, stop = self._range(s, local)
        for name, _, _ in iter_members(self._pread(s, start, stop), f"shard {self._paths[s]}", start):
            split = split_name(name)
            if split is not None:
                return split[0]
        return None
