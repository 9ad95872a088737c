"""The samples of blocks read but not yet asked for, kept by each process until they are used
(:class:`SampleCache`, bounded by bytes: ``DATAREEL_BLOCK_CACHE_BYTES``, default 256 MiB)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from ...settings import byte_count

ENV_CACHE_BYTES = "DATAREEL_BLOCK_CACHE_BYTES"
CACHE_BYTES = 256 << 20
"""Default bytes of raw samples one process keeps from the blocks it read (``DATAREEL_BLOCK_CACHE_BYTES``)."""
Raw = tuple[str, dict[str, bytes]]  # (key, {part: bytes})
Members = list[tuple[str, int, int]]  # (name, data offset in the block's bytes, size) of one sample's members
Kept = tuple[Members, bytes, tuple[str, int, int, int]]
"""A kept sample: its members, the block's bytes they index, and where it is (for group's errors). Its
parts are copied out when it is used (into memory a process reuses; copies made when the block is read
would fill fresh pages: measured 5x slower for 100 KB samples)."""


class SampleCache:
    """Samples by ``(shard url, index in shard)`` (:data:`Kept`), the least recently put out first while the
    blocks' bytes they hold exceed ``limit`` (a block's bytes count once, until its last kept sample goes)."""

    def __init__(self, limit: int):
        self.limit, self.bytes = limit, 0
        self._kept: OrderedDict[tuple[str, int], Kept] = OrderedDict()
        self._blocks: dict[int, list[int]] = {}  # id of a block's bytes -> [its samples kept, its length]
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._kept

    def pop(self, key: tuple[str, int]) -> Kept | None:
        with self._lock:
            found = self._kept.pop(key, None)
            if found is not None:
                self._release(found[1])
            return found

    def put(self, key: tuple[str, int], kept: Kept) -> None:
        blob = kept[1]
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._release(old[1])
            if len(blob) > self.limit:
                return
            self._kept[key] = kept
            held = self._blocks.setdefault(id(blob), [0, len(blob)])
            held[0] += 1
            self.bytes += len(blob) if held[0] == 1 else 0
            while self.bytes > self.limit:
                self._release(self._kept.popitem(last=False)[1][1])

    def _release(self, blob: bytes) -> None:
        held = self._blocks[id(blob)]
        held[0] -= 1
        if not held[0]:
            del self._blocks[id(blob)]
            self.bytes -= held[1]

    def __len__(self) -> int:
        return len(self._kept)


_PER_PROCESS: dict[int, SampleCache] = {}


def cache_limit() -> int:
    """``DATAREEL_BLOCK_CACHE_BYTES`` checked (the default where unset)."""
    return byte_count(
        ENV_CACHE_BYTES,
        CACHE_BYTES,
        "raw samples each process keeps from the blocks it read",
        otherwise="; 0 keeps none",
    )


def sample_cache() -> SampleCache:
    """This process's cache (a forked child starts empty), sized by ``DATAREEL_BLOCK_CACHE_BYTES``."""
    pid = os.getpid()
    found = _PER_PROCESS.get(pid)
    if found is None:
        limit = cache_limit()
        _PER_PROCESS.clear()
        found = _PER_PROCESS[pid] = SampleCache(limit)
    return found
