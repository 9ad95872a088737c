"""A node-local cache of byte blocks read from buckets: one bounded directory per node, shared by every rank
and DataLoader worker on it, so a block of a shard is fetched once per node.

A block is ``(url, ETag, start, stop)`` (:class:`BlockKey`): bytes ``[start, stop)`` of the object at ``url`` as it
was when its ETag was read.  Each block is one file, named by a digest of its key and holding a header (the key, the
payload's length and CRC-32) then the bytes (:mod:`.block_files`: the format and the file locks).  It is written to
a temporary file and renamed into place, so a reader sees a whole file or none; a file whose header, size or
checksum disagrees with the key asked for (a crash of the machine, a hand edit, a digest collision) is refused,
removed and fetched again.  Two processes that miss the same block at once agree through a lock file (``flock``):
the one holding it fetches and stores, the other waits (at most :data:`WAIT` seconds) and reads the file, or fetches
itself if there is none (the holder died: its lock went with it).  The directory is kept to its limit by removing
the least recently used blocks (a read touches a block's modification time); each process looks at the directory
again after writing 1/64 of the limit, so it stays near the limit with many writers.

``DATAREEL_NODE_CACHE``: the directory (default ``<tempdir>/datareel-blocks-<uid>``, mode 0700), or ``off``.
It outlives every process on purpose (the next run on the node reads its blocks from it), bounded by its limit;
remove it by hand to reclaim the space.
``DATAREEL_NODE_CACHE_BYTES``: its limit (default 4 GiB).  Local disks need none of it: the kernel's page
cache is their node cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence

from ..errors import OptionError
from ..settings import byte_count
from .block_files import BlockKey, parse
from .block_files import remove_unheld as _remove_unheld
from .block_files import touch as _touch
from .block_files import try_lock as _try_lock
from .block_files import wait_lock as _wait_lock

__all__ = ["BlockKey", "NodeCache", "check_directory", "configured", "directory", "limit", "node_cache", "parse"]

log = logging.getLogger("datareel")
ENV_DIR = "DATAREEL_NODE_CACHE"
ENV_BYTES = "DATAREEL_NODE_CACHE_BYTES"
DEFAULT_BYTES = 4 << 30
WAIT = 30.0
"""Seconds a process waits for another fetching the same block before fetching it itself."""
STALE = 120.0
"""Seconds after which a temporary or lock file nobody holds is a crashed process's and is removed."""
Fetch = Callable[[list[BlockKey]], dict[BlockKey, bytes]]
"""Fetches blocks from the store, together: the ones it got (a failed one is left out)."""


def _write_file(fd: int, header: bytes, payload: bytes) -> None:
    """Write a block file's bytes (one function, so a test can stop a writer in the middle)."""
    for part in (header, payload):
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view) :]


class NodeCache:
    """The blocks in directory ``root``, kept to ``limit`` bytes (see the module doc)."""

    def __init__(self, root: str, limit: int):
        self.root, self.limit = root, limit
        self.fetched = 0  # blocks this process fetched from the store (for tests and figures)
        self._known = 0  # bytes in the directory when last looked at, plus what this process wrote since
        self._written = 0  # bytes written since the directory was last looked at
        self._sweep()

    def _path(self, key: BlockKey) -> str:
        return os.path.join(self.root, key.name())

    def get(self, key: BlockKey) -> bytes | None:
        """The block's bytes if the directory holds it whole (a damaged file is removed); no I/O to the store."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        payload = parse(key, data)
        if payload is None:
            log.warning("node cache: %s is not the block %r it is named for; removed, it is fetched again", path, key)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        _touch(path)  # recently used
        return payload

    def put(self, key: BlockKey, payload: bytes) -> None:
        """Store the block (atomically: a temporary file renamed into place), then keep the directory to its
        limit. A block over a quarter of the limit is not stored."""
        if len(payload) != key.stop - key.start or len(payload) > self.limit // 4:
            return
        path = self._path(key)
        tmp = os.path.join(self.root, f".{key.name()}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_file(fd, key.header(payload), payload)
            finally:
                os.close(fd)
            _touch(tmp)
            os.replace(tmp, path)
        except OSError as exc:  # a full disk, say: the cache is an optimisation, the read goes on
            log.warning("node cache: could not store a block in %s (%s)", self.root, exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return
        size = os.path.getsize(path) if os.path.exists(path) else len(payload)
        self._known += size
        self._written += size
        if self._known > self.limit or self._written > self.limit // 64:
            self._sweep()

    def fetch(self, keys: Sequence[BlockKey], fetch: Fetch) -> dict[BlockKey, bytes]:
        """The blocks ``keys``: from the directory, else fetched by ``fetch`` (called at most twice, with the
        blocks to fetch together: it leaves out what failed) and stored. A block another process is fetching
        is waited for, then read from the directory. Blocks no fetch gave are left out."""
        out: dict[BlockKey, bytes] = {}
        mine: dict[BlockKey, int] = {}  # lock files held
        busy: dict[BlockKey, int] = {}  # lock files another process holds
        wanted: list[BlockKey] = []
        try:
            for key in dict.fromkeys(keys):
                found = self.get(key)
                if found is not None:
                    out[key] = found
                    continue
                fd = self._lock(key)
                if fd is None:
                    wanted.append(key)  # no lock file can be made: fetched without one
                elif _try_lock(fd):
                    mine[key] = fd
                else:
                    busy[key] = fd
            for key in mine:
                found = self.get(key)  # stored by another process before the lock was taken?
                if found is None:
                    wanted.append(key)
                else:
                    out[key] = found
            self._fetched_into(out, wanted, fetch)
            for key in list(mine):
                self._unlock(key, mine.pop(key))
            deadline, late = time.monotonic() + WAIT, []
            for key in list(busy):
                if _wait_lock(busy[key], deadline):
                    found = self.get(key)
                    if found is not None:
                        out[key] = found
                        self._unlock(key, busy.pop(key))
                        continue
                    mine[key] = busy.pop(key)  # the holder died or failed: fetched under the lock
                late.append(key)
            self._fetched_into(out, late, fetch)
        finally:
            for key, fd in [*mine.items(), *busy.items()]:
                self._unlock(key, fd)
        return out

    def _fetched_into(self, out: dict[BlockKey, bytes], keys: list[BlockKey], fetch: Fetch) -> None:
        if not keys:
            return
        got = fetch(keys)
        self.fetched += len(got)
        for key in keys:
            payload = got.get(key)
            if payload is not None and len(payload) == key.stop - key.start:
                self.put(key, payload)
                out[key] = payload

    def _lock(self, key: BlockKey) -> int | None:
        try:
            return os.open(self._path(key) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None

    def _unlock(self, key: BlockKey, fd: int) -> None:
        """Remove the lock file if it is still the one held, then let go of it."""
        with contextlib.suppress(OSError):
            path = self._path(key) + ".lock"
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        os.close(fd)

    def _sweep(self) -> None:
        """Look at the directory: remove what crashed processes left, then the least recently used blocks
        while it holds more than the limit (down to 90% of it). One process at a time sweeps."""
        self._written = 0
        try:
            guard = os.open(os.path.join(self.root, ".sweep"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            if not _try_lock(guard):
                return
            now, blocks, total = time.time(), [], 0
            with os.scandir(self.root) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if entry.name.endswith(".blk"):
                        blocks.append((st.st_mtime_ns, st.st_size, entry.path))
                        total += st.st_size
                    elif ".tmp-" in entry.name:
                        if now - st.st_mtime > STALE:
                            with contextlib.suppress(OSError):
                                os.unlink(entry.path)
                        else:
                            total += st.st_size
                    elif entry.name.endswith(".lock") and now - st.st_mtime > STALE:
                        _remove_unheld(entry.path)
            if total > self.limit:
                blocks.sort()
                for _, size, path in blocks:
                    if total <= self.limit * 0.9:
                        break
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                        total -= size
            self._known = total
        finally:
            os.close(guard)


def configured() -> tuple[str | None, int]:
    """``(directory or None when off, limit in bytes)`` from the environment (checked)."""
    return directory(), limit()


def limit() -> int:
    """``DATAREEL_NODE_CACHE_BYTES`` checked (the default where unset)."""
    return byte_count(
        ENV_BYTES,
        DEFAULT_BYTES,
        "the node-local block cache's limit",
        least=1,
        otherwise=f", or set {ENV_DIR}=off to turn the cache off",
    )


def directory() -> str | None:
    """The directory ``DATAREEL_NODE_CACHE`` names (the default where unset or empty), or ``None`` for ``off``."""
    where = os.environ.get(ENV_DIR)
    if where is not None and where.strip().lower() == "off":
        return None
    return where or os.path.join(tempfile.gettempdir(), f"datareel-blocks-{os.getuid()}")


def check_directory() -> None:
    """A directory named in ``DATAREEL_NODE_CACHE`` checked without making anything: a directory this user may
    write in, or one that can be made in such a directory (the default one is checked when first used, and
    skipped with a warning if unusable)."""
    root = directory()
    if root is None or not os.environ.get(ENV_DIR):
        return
    found = os.path.abspath(root)
    while not os.path.exists(found) and os.path.dirname(found) != found:
        found = os.path.dirname(found)
    if not os.path.isdir(found) or not os.access(found, os.W_OK | os.X_OK):
        what = "is not a directory" if not os.path.isdir(found) else "is a directory this user cannot write in"
        raise OptionError(
            f"{ENV_DIR}={os.environ[ENV_DIR]!r}: {found} {what}, so the node-local block cache cannot be kept "
            f"there; name a directory this user may write in (it is made if missing), or {ENV_DIR}=off"
        )


def _open_dir(root: str, chosen: bool) -> NodeCache | None:
    """The cache in ``root`` (made, mode 0700), or ``None`` (logged) where it cannot be used: the default
    directory must be this user's, so that no other user can plant blocks in it."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        st = os.stat(root)
        if not chosen and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            if st.st_uid != os.getuid():
                log.warning("node cache: %s belongs to another user; not used (set %s to a directory)", root, ENV_DIR)
                return None
            os.chmod(root, 0o700)
        return NodeCache(root, limit())
    except OSError as exc:
        log.warning("node cache: %s cannot be used (%s); blocks are fetched without it", root, exc)
        return None


_PER_PROCESS: dict[int, NodeCache | None] = {}


def node_cache() -> NodeCache | None:
    """This process's view of the node's cache (made on first use, as the environment says), or ``None``."""
    pid = os.getpid()
    if pid not in _PER_PROCESS:
        _PER_PROCESS.clear()
        root, _ = configured()
        _PER_PROCESS[pid] = None if root is None else _open_dir(root, os.environ.get(ENV_DIR) is not None)
    return _PER_PROCESS[pid]
