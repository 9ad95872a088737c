"""Bounded decompression of a part: a ``.gz`` part unpacked a chunk at a time and refused past
:data:`MAX_DECOMPRESSED` bytes (``DATAREEL_MAX_DECOMPRESSED``), so a gzip bomb is never held in memory;
a zip (``npz``, a ``pth`` archive) refused when its members' declared sizes add up to more."""

from __future__ import annotations

import io
import os
import re
import zipfile
import zlib
from typing import Any

from webdataset import autodecode

from ...errors import DatasetError, OptionError

TORCH = "pth"
"""Decoded with ``torch.load``: ``weights_only=True`` (tensors and plain containers) unless trusted."""
WRAPPER = "gz"
"""The compression webdataset's decoder unpacks before it dispatches (its ``gzfilter``, one level)."""
ZIPPED = frozenset({"npz", TORCH})
"""Extensions whose decoders unpack a zip archive (numpy's ``npz``; torch's archive format)."""
ENV_MAX_DECOMPRESSED = "DATAREEL_MAX_DECOMPRESSED"
MAX_DECOMPRESSED = 1 << 30
"""Bytes one compressed part may unpack to (default 1 GiB; ``DATAREEL_MAX_DECOMPRESSED``, e.g. ``4GiB``,
or ``PartDecoder(max_decompressed=...)``): a ``.gz`` part's contents, or the members of an ``npz`` /
``pth`` zip together.  A part past it is a decode error (a sample failure), never unpacked whole."""
_CHUNK = 1 << 20  # bytes of output asked of zlib at a time
_UNITS = {"": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def decompression_limit(value: int | str | None = None) -> int:
    """The decompression limit in bytes: ``value`` (bytes, or ``"512MiB"``-style text), else
    ``$DATAREEL_MAX_DECOMPRESSED``, else :data:`MAX_DECOMPRESSED`.  A limit that is not a positive
    size is an :class:`~datareel.errors.OptionError` naming where it came from."""
    source = "max_decompressed"
    if value is None:
        value = os.environ.get(ENV_MAX_DECOMPRESSED)
        source = ENV_MAX_DECOMPRESSED
        if value is None or not value.strip():
            return MAX_DECOMPRESSED
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d{1,20})\s*([kmgt]ib)?\s*", value, re.IGNORECASE)
        number = int(match[1]) * _UNITS[(match[2] or "").lower()] if match else 0
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if number <= 0:
        raise OptionError(
            f"{source}={value!r} is not a size: give a positive number of bytes, optionally with KiB, MiB, GiB "
            f"or TiB (e.g. 4GiB); it bounds what one compressed part may unpack to (default 1GiB)"
        )
    return number


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def _too_big(limit: int, compressed: int, what: str) -> DatasetError:
    return DatasetError(
        f"{what} past the limit of {_size(limit)} on what one compressed part may unpack to ({compressed:,} bytes "
        f"compressed): a decompression bomb, or a part bigger than the limit. If the data is yours, raise the "
        f"limit with {ENV_MAX_DECOMPRESSED}=<size> (e.g. {_size(limit * 4).replace(' ', '')}) in the "
        f"environment the loader starts in"
    )


def gunzip(data: bytes, limit: int) -> bytes:
    """The contents of gzip ``data`` (every member, as ``gzip.decompress``), unpacked a chunk at a time:
    past ``limit`` bytes it stops and raises, having held at most ``limit`` bytes plus one chunk."""
    out: list[bytes] = []
    total = 0
    rest = data
    while rest.strip(b"\0"):  # gzip allows zero padding after the last member
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member
        pending = rest
        while not inflate.eof:
            try:
                chunk = inflate.decompress(pending, min(_CHUNK, limit + 1 - total))
            except zlib.error as exc:
                raise DatasetError(f"its gzip data is damaged ({exc})") from None
            total += len(chunk)
            if total > limit:
                raise _too_big(limit, len(data), "it unpacks")
            tail = inflate.unconsumed_tail
            if not chunk and not inflate.eof and len(tail) == len(pending):  # nothing read, nothing made
                raise DatasetError("its gzip data ends before its compressed stream does (truncated)")
            out.append(chunk)
            pending = tail
        rest = inflate.unused_data
    return b"".join(out)


def check_zip(data: bytes, limit: int) -> None:
    """Refuse a zip (``npz``, a ``pth`` archive) whose members unpack to more than ``limit`` bytes together,
    from the sizes its directory declares (``zipfile`` reads no member past its declared size)."""
    if not data.startswith(b"PK"):
        return  # not a zip: the decoder says what it is
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return  # not a zip after all: the decoder names the failure
    if total > limit:
        raise _too_big(limit, len(data), f"its zip members declare {total:,} bytes,")


def _gz_filter(limit: int):
    """webdataset's ``gzfilter`` (one level, ``.gz`` only) with :func:`gunzip`'s limit."""

    def gz(key: str, data: bytes) -> Any:
        if not key.endswith("." + WRAPPER):
            return None
        return autodecode.Continue(key[: -len(WRAPPER) - 1], gunzip(data, limit))

    return gz


def _zip_filter(limit: int):
    def zips(key: str, data: bytes) -> None:
        if key.rpartition(".")[2] in ZIPPED:
            check_zip(data, limit)

    return zips
