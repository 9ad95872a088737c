"""Blocks of the next micro-batches fetched ahead, in the background, for a WebDataset split in a bucket.

The reel's future is known: whoever holds the next descriptors can announce their samples
(:meth:`~.blocks.BlockReads.fetch_ahead`), and their blocks are fetched on a thread of this process (through
the node cache, as any block) while the current micro-batch is made, so the read that needs them later
waits less or not at all.  At most ``DATAREEL_LOOKAHEAD_BYTES`` (default 64 MiB) of blocks are fetched or
held ahead per reader and process; announcements past that are dropped (a hint only: the read fetches what
it does not find).  A block fetched ahead and never read goes first when room is needed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ...settings import byte_count
from ...storage.hints import hint_failure

ENV_AHEAD_BYTES = "DATAREEL_LOOKAHEAD_BYTES"
AHEAD_BYTES = 64 << 20
Range = tuple[str, int, int]  # (shard url, start, stop)
Fetch = Callable[[list[Range]], dict[Range, bytes]]


def configured_limit() -> int:
    """``DATAREEL_LOOKAHEAD_BYTES`` from the environment, checked (the default where unset)."""
    return byte_count(
        ENV_AHEAD_BYTES,
        AHEAD_BYTES,
        "blocks each reading process fetches ahead of the micro-batch it makes",
        otherwise="; 0 turns lookahead off",
    )


class Ahead:
    """One reader's blocks fetched ahead in this process: ranges -> the fetch that gives them, bounded by bytes."""

    def __init__(self, limit: int):
        self.limit, self.bytes = limit, 0
        self._pending: OrderedDict[Range, Future[dict[Range, bytes]]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, ranges: list[Range], fetch: Fetch) -> list[Range]:
        """Fetch ``ranges`` in the background (those not fetched already, while they fit): -> those submitted."""
        with self._lock:
            taken: list[Range] = []
            for r in dict.fromkeys(ranges):
                if r in self._pending:
                    continue
                size = r[2] - r[1]
                while self.bytes + size > self.limit and self._drop_done():
                    pass
                if self.bytes + size > self.limit:
                    break
                taken.append(r)
                self.bytes += size
            if not taken:
                return taken
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="datareel-ahead")
            future = self._pool.submit(fetch, taken)
            for r in taken:
                self._pending[r] = future
            return taken

    def take(self, wanted: Range) -> bytes | None:
        """The bytes of ``wanted`` if a fetch ahead covers them (waiting for it to finish), else ``None``."""
        with self._lock:
            found = wanted if wanted in self._pending else None
            if found is None:
                url, start, stop = wanted
                found = next((r for r in self._pending if r[0] == url and r[1] <= start and stop <= r[2]), None)
            if found is None:
                return None
            future = self._pending.pop(found)
            self.bytes -= found[2] - found[1]
        try:
            blob = future.result().get(found)
        except Exception as exc:
            if not hint_failure(exc):  # a configuration or programming error is never a hint's to swallow
                raise
            return None  # the store's or the machine's failure: the read fetches it again and reports it
        if blob is None:
            return None
        return blob if found == wanted else blob[wanted[1] - found[1] : wanted[2] - found[1]]

    def _drop_done(self) -> bool:
        """Forget the oldest range whose fetch finished (fetched ahead, never read); ``False`` if none."""
        for r, future in self._pending.items():
            if future.done():
                del self._pending[r]
                self.bytes -= r[2] - r[1]
                return True
        return False
