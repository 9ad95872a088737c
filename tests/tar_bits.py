"""Hand-made tar headers and records, for tests of the tar parser on bytes no tar writer produces."""

from __future__ import annotations

from datareel.sources.tarparse import BLOCK, iter_members
from hangs import must_return


def header(name: bytes = b"k.txt", size_field: bytes | None = None, kind: bytes = b"0", size: int = 0) -> bytes:
    """A 512-byte ustar header with a valid checksum (``size_field`` overrides the 12-byte size field)."""
    h = bytearray(BLOCK)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\0"
    h[124:136] = size_field if size_field is not None else f"{size:011o}\0".encode()
    h[136:148] = b"00000000000\0"
    h[156:157] = kind
    h[257:263] = b"ustar\0"
    h[148:156] = b" " * 8
    h[148:156] = f"{sum(h):06o}\0 ".encode()
    return bytes(h)


def pax(payload: bytes) -> bytes:
    padded = payload + b"\0" * (-len(payload) % BLOCK)
    return header(b"PaxHeader", kind=b"x", size=len(payload)) + padded


def members(blob: bytes) -> list:
    with must_return():
        return list(iter_members(blob, "fuzz.tar"))
