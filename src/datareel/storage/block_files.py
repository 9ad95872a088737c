"""The files of the node cache's directory (:mod:`.node_cache`): a block's key, the name and header of the
file that holds it (:func:`parse` refuses a file that is not the whole, undamaged block asked for), and the
``flock`` helpers that let two processes agree on who fetches a block.

A block file is a header (magic, start, stop, CRC-32 of the payload, the lengths of the ETag and the URL),
the ETag and the URL, then the payload; it is named by a BLAKE2b digest of its key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import struct
import time
import zlib
from dataclasses import dataclass

_MAGIC = b"DRBLK1\0\0"
_HEAD = struct.Struct("<8sQQIHH")  # magic, start, stop, crc32 of the payload, len(etag), len(url)


@dataclass(frozen=True)
class BlockKey:
    """Bytes ``[start, stop)`` of the object at ``url`` whose ETag is ``etag``."""

    url: str
    etag: str
    start: int
    stop: int

    def name(self) -> str:
        text = f"{self.url}\0{self.etag}\0{self.start}\0{self.stop}".encode("utf-8", "surrogateescape")
        return hashlib.blake2b(text, digest_size=16).hexdigest() + ".blk"

    def header(self, payload: bytes) -> bytes:
        etag, url = self.etag.encode("utf-8", "surrogateescape"), self.url.encode("utf-8", "surrogateescape")
        return _HEAD.pack(_MAGIC, self.start, self.stop, zlib.crc32(payload), len(etag), len(url)) + etag + url


def parse(key: BlockKey, data: bytes) -> bytes | None:
    """The payload of a block file's bytes if they are the whole, undamaged block ``key``; else ``None``."""
    if len(data) < _HEAD.size:
        return None
    magic, start, stop, crc, etag_len, url_len = _HEAD.unpack_from(data)
    body = _HEAD.size + etag_len + url_len
    if magic != _MAGIC or (start, stop) != (key.start, key.stop) or len(data) != body + stop - start:
        return None
    if data[_HEAD.size : body] != key.header(b"")[_HEAD.size :]:  # another url or ETag (or a collision)
        return None
    payload = data[body:]
    return payload if zlib.crc32(payload) == crc else None


def touch(path: str) -> None:
    """Mark a block used now, to the nanosecond (the kernel's own file times tick once a jiffy: ties)."""
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(path, ns=(now, now))


def remove_unheld(path: str) -> None:
    """Remove a lock file a crashed process left (one nobody holds)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR)
        try:
            if try_lock(fd):
                os.unlink(path)
        finally:
            os.close(fd)


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def wait_lock(fd: int, deadline: float) -> bool:
    """Take the lock, polling until ``deadline`` (a holder that dies lets go at once)."""
    pause = 0.001
    while not try_lock(fd):
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True
