"""Reading a WebDataset split in blocks (for :class:`datareel.BlockShuffle`): the ``k`` consecutive samples of
a block are contiguous in their shard's tar, so a block is one read of its byte span, parsed in one pass.

The block of sample ``i`` is samples ``[i - i % k, min(i - i % k + k, len))``, cut to the shard of ``i``
(samples excluded from the split by key that lie inside the span are read and dropped).  A micro-batch
asks for one or a few samples of each block; the block's other samples are kept, as their raw key and
part bytes, in this process's :class:`SampleCache` (bounded by bytes, least recently used out first), and
each is taken out when it is read, without I/O.  Locally a block is one positioned read through the
shard's handle (the kernel's page cache is the node's cache); in a bucket the micro-batch's missing blocks
are one :meth:`~datareel.storage.Files.read_ranges` call (one range each), through the node's
:mod:`~datareel.storage.node_cache` where the shard's ETag is known.  Every check of a sample-by-sample read
stays: a shard is opened and checked on its first use, a short read or a sample this path cannot parse is
left to ``read()``, which reads it alone and raises what is wrong under the error policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import DatasetError
from ...sources.index_files import sample_range
from ...storage import Files, HandleCache
from ...storage.handles import Handle
from ...storage.hints import hint_failure
from ...storage.node_cache import BlockKey, node_cache
from .ahead import Ahead, configured_limit
from .kept import Raw, SampleCache, sample_cache
from .members import group
from .tarparse import iter_members, plain_members

SPAN_LIMIT = 64 << 20
"""A block whose byte span is longer than this (big samples: video) is read a sample at a time."""


@dataclass(frozen=True)
class Span:
    """One read: bytes ``[start, stop)`` of shard ``shard``, holding the samples ``members`` =
    ``(sample index or -1 when not asked for, index in shard, start, stop)``."""

    shard: int
    start: int
    stop: int
    members: tuple[tuple[int, int, int, int], ...]


def block_members(index: int, k: int, size: int) -> np.ndarray:
    """The samples of sample ``index``'s block of ``k`` (before the cut to its shard). -> int64[<= k]"""
    first = index - index % k
    return np.arange(first, min(first + k, size), dtype=np.int64)


class BlockReads:
    """The block path of :class:`~datareel.formats.webdataset.reader.WebDatasetSource` (a mixin over
    :class:`~.shards.ShardReads`, whose attributes and methods it uses)."""

    reads_blocks = True
    """Read in blocks when the loader asks (``read_many(indices, block=k)``, ``prefetch(indices, block=k)``)."""
    prefetches: bool
    _paths: list[str]
    _size: int
    _blocks: dict[tuple[str, int, int], bytes]
    _etag_seen: dict[str, str]
    _ahead: Ahead | None  # this process's blocks fetched ahead (made on first use)

    if TYPE_CHECKING:  # from ShardReads and the reader

        def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            raise NotImplementedError

        def _cache(self) -> HandleCache:
            raise NotImplementedError

        def _store(self) -> Files:
            raise NotImplementedError

        def _open_shard(self, s: int) -> Handle:
            raise NotImplementedError

        def _index(self, s: int) -> np.ndarray:
            raise NotImplementedError

        def _open_first_used(self, shards: np.ndarray) -> None:
            raise NotImplementedError

        def _sample(self, s: int, local: int, key: str, parts: dict[str, bytes], where: str) -> Any:
            raise NotImplementedError

    def read_blocks(self, indices: np.ndarray, k: int) -> list[Any]:
        """Samples ``indices`` (int64[n]) read in blocks of ``k``; ``None`` where a sample is left to ``read()``."""
        indices = np.asarray(indices, dtype=np.int64)
        out: list[Any] = [None] * len(indices)
        wanted = np.unique(indices[(indices >= 0) & (indices < self._size)])  # (u,) out of range: read() names it
        if not len(wanted):
            return out
        kept = sample_cache()
        hits, spans = self._spans(wanted, k, kept)
        raws: dict[int, tuple[int, int, Raw]] = {}  # sample index -> (shard, index in shard, raw)
        for index, s, local in hits:
            found = kept.pop((self._paths[s], local))
            if found is not None:
                try:
                    members, data, place = found
                    raws[index] = (s, local, group(members, data, 0, place))
                except Exception:
                    continue  # read() reads it alone and raises what is wrong with it
        for span, blob in zip(spans, self._span_bytes(spans)):
            if blob is not None:
                self._parse(span, blob, raws, kept)
        made: dict[int, Any] = {}
        for index, (s, local, (key, parts)) in raws.items():
            try:
                made[index] = self._sample(s, local, key, parts, f"shard {self._paths[s]} key {key!r}")
            except Exception:
                continue  # a part that does not decode: read() raises it
        return [made.get(i) for i in indices.tolist()]

    def prefetch_blocks(self, indices: np.ndarray, k: int) -> None:
        """In a bucket: fetch the blocks :meth:`read_blocks` will need for ``indices`` now, together (their
        shards new to this process checked concurrently first). Never raises: reads report failures."""
        self._blocks = {}
        try:
            wanted = np.unique(np.asarray(indices, dtype=np.int64))
            shard, _ = self.locate_many(wanted)
        except (IndexError, ValueError):
            return
        self._open_first_used(shard)
        _, spans = self._spans(wanted, k, sample_cache())
        got = self._span_bytes(spans)  # what was fetched ahead, and the rest together
        self._blocks = {
            (self._paths[x.shard], x.start, x.stop): blob for x, blob in zip(spans, got) if blob is not None
        }

    def fetch_ahead(self, indices: np.ndarray, k: int) -> None:
        """In a bucket: start fetching the blocks of samples ``indices`` (int64[n], of micro-batches made
        later) in the background, at most ``DATAREEL_LOOKAHEAD_BYTES`` of them fetched or held ahead
        (:mod:`.ahead`); the read that needs one takes it. Locally nothing (the kernel reads ahead). A hint: a
        failure of the store, the machine or the data is left to the read; a configuration or programming
        error is raised (:mod:`datareel.storage.hints`)."""
        if not self.prefetches:
            return
        try:
            wanted = np.unique(np.asarray(indices, dtype=np.int64))
            shard, _ = self.locate_many(wanted)
        except (IndexError, ValueError):
            return  # not samples of this split: nothing to fetch
        self._open_first_used(shard)  # first: a first use in this process resets its per-process state
        if self._ahead is None:  # DATAREEL_LOOKAHEAD_BYTES: checked when the Loader was made (datareel.settings)
            self._ahead = Ahead(configured_limit())
        try:
            _, spans = self._spans(wanted, k, sample_cache())
        except Exception as exc:
            if not hint_failure(exc):  # a configuration or programming error is never a hint's to swallow
                raise
            return
        by_range = {(self._paths[x.shard], x.start, x.stop): (x.shard, x.start, x.stop) for x in spans}

        def fetch(ranges: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], bytes]:
            got = dict(self._fetch([by_range[r] for r in ranges]))
            return {r: blob for r in ranges if (blob := got.get(by_range[r])) is not None}

        self._ahead.submit(list(by_range), fetch)

    def _spans(self, wanted: np.ndarray, k: int, kept: SampleCache) -> tuple[list[tuple[int, int, int]], list[Span]]:
        """``(hits, spans)``: the samples of ``wanted`` (int64[u], sorted) kept already, as ``(index, shard,
        index in shard)``, and the reads that give the rest with the uncached samples of their blocks."""
        shard, local = self.locate_many(wanted)  # (u,), (u,)
        hits: list[tuple[int, int, int]] = []
        missing: list[tuple[int, int, int]] = []
        for index, s, i in zip(wanted.tolist(), shard.tolist(), local.tolist()):
            (hits if (self._paths[s], i) in kept else missing).append((index, s, i))
        spans: list[Span] = []
        asked = {index for index, _, _ in missing}
        done: set[tuple[int, int]] = set()  # (block, shard) read already
        for index, s, _ in missing:
            if (index // k, s) in done:
                continue
            done.add((index // k, s))
            members = block_members(index, k, self._size)  # (<= k,)
            ms, ml = self.locate_many(members)
            try:
                idx = self._index(s)  # opened and checked on first use
            except Exception as exc:
                if not hint_failure(exc):
                    raise
                continue  # read() raises it, under the error policy
            rows = []
            for j, i in zip(members[ms == s].tolist(), ml[ms == s].tolist()):
                if j in asked or (self._paths[s], i) not in kept:
                    try:
                        rows.append((j if j in asked else -1, i, *sample_range(idx, i, lambda: "")))
                    except DatasetError:
                        continue  # a damaged index entry: read() names it
            if not rows:
                continue
            start, stop = min(r[2] for r in rows), max(r[3] for r in rows)
            if stop - start <= SPAN_LIMIT:
                spans.append(Span(s, start, stop, tuple(rows)))
            else:  # big samples: each asked one alone
                spans += [Span(s, r[2], r[3], (r,)) for r in rows if r[0] >= 0]
        return hits, spans

    def _span_bytes(self, spans: list[Span]) -> list[bytes | None]:
        """Each span's bytes (prefetched, else read now), or ``None`` where the read failed or came short."""
        out: list[bytes | None] = [self._blocks.pop((self._paths[x.shard], x.start, x.stop), None) for x in spans]
        if self._ahead is not None:  # fetched ahead (waiting for a fetch under way)
            for j, x in enumerate(spans):
                if out[j] is None:
                    out[j] = self._ahead.take((self._paths[x.shard], x.start, x.stop))
        todo = [j for j, blob in enumerate(out) if blob is None]
        if todo:
            for j, (_, blob) in zip(todo, self._fetch([(spans[j].shard, spans[j].start, spans[j].stop) for j in todo])):
                out[j] = blob
        return [b if b is not None and len(b) == x.stop - x.start else None for x, b in zip(spans, out)]

    def _fetch(self, ranges: list[tuple[int, int, int]]) -> list[tuple[tuple[int, int, int], bytes | None]]:
        """Bytes of each ``(shard, start, stop)``: locally one positioned read each; in a bucket all in one
        ``read_ranges`` call, through the node cache where the shard's ETag is known."""
        if not self.prefetches:
            cache = self._cache()
            got: list[tuple[tuple[int, int, int], bytes | None]] = []
            for s, a, b in ranges:
                try:
                    with cache.use(self._paths[s], lambda s=s: self._open_shard(s)) as handle:  # type: ignore[misc]
                        got.append(((s, a, b), handle.read_range(a, b)))  # not closed by another thread meanwhile
                except (DatasetError, OSError):
                    got.append(((s, a, b), None))  # read() raises it
            return got
        files, node = self._store(), node_cache()
        keys = {r: (self._paths[r[0]], r[1], r[2]) for r in ranges}
        fetched: dict[tuple[str, int, int], bytes] = {}
        tagged: dict[BlockKey, tuple[str, int, int]] = {}  # through the node cache
        plain = []
        for url in keys.values():
            etag = self._etag_seen.get(url[0])
            if node is not None and etag is not None:
                tagged[BlockKey(url[0], etag, url[1], url[2])] = url
            else:
                plain.append(url)
        try:
            if plain:
                fetched.update(files.read_ranges(plain))
            if tagged and node is not None:

                def from_store(blocks: list[BlockKey]) -> dict[BlockKey, bytes]:
                    got = files.read_ranges([tagged[b] for b in blocks])
                    return {b: got[tagged[b]] for b in blocks if tagged[b] in got}

                fetched.update({tagged[b]: blob for b, blob in node.fetch(list(tagged), from_store).items()})
        except Exception as exc:
            if not hint_failure(exc):  # a configuration or programming error is never a hint's to swallow
                raise
            # the store's or the machine's failure: what is missing is read sample by sample, which reports it
        return [(r, fetched.get(url)) for r, url in keys.items()]

    def _parse(self, span: Span, blob: bytes, raws: dict[int, tuple[int, int, Raw]], kept: SampleCache) -> None:
        """The samples of one span's bytes: asked ones into ``raws``, the others kept for later."""
        where = f"shard {self._paths[span.shard]}"
        starts = [r[2] - span.start for r in span.members]
        stops = [r[3] - span.start for r in span.members]
        for (index, i, a, b), first, last, members in zip(
            span.members, starts, stops, plain_members(blob, starts, stops)
        ):
            try:
                if members is None:  # long names, PAX headers, damage: the full parser takes it or says what it is
                    members = list(iter_members(memoryview(blob)[first:last], where, first))
                if index >= 0:
                    raws[index] = (span.shard, i, group(members, blob, 0, (where, i, a, b)))
                else:  # its parts are copied out when it is used
                    kept.put((self._paths[span.shard], i), (members, blob, (where, i, a, b)))
            except Exception:
                continue  # read() reads it alone and raises what is wrong with it
