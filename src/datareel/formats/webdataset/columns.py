"""The tar headers of a micro-batch's samples parsed at once, into columns: every sample's key, and per part
the data offset and size of its member in each sample.

:func:`plain_columns` takes the common case only, and every header in one numpy pass per member round (the
first member of every sample, then the second, ...): plain ustar/GNU regular members, names without a
ustar prefix, canonical octal numbers, checksums that hold, every sample holding the same parts in the same
order under one key. Anything else (a long name, a PAX header, a skipped ``__...__`` member, a member without
a part, two keys, damage, samples that differ in their parts) gives ``None``: the caller reads those
samples one by one (:func:`~.tarparse.iter_members`), which parses them or names what is wrong, exactly as
before. So a micro-batch read here is the one the per-sample path reads, or it is read by that path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tarparse import BLOCK, split_name

_AT = np.arange(BLOCK, dtype=np.int64)  # (512,)
_NAME = np.arange(100, dtype=np.int64)  # (100,) the name field's byte positions
_POW8 = 8 ** np.arange(5, -1, -1, dtype=np.int64)  # (6,) a 6-digit octal field's place values
_USTAR = np.frombuffer(b"ustar", dtype=np.uint8)
_SIZE = np.arange(124, 135, dtype=np.int64)  # (11,) the size field's digits (byte 135 is checked with the header)
_POW8_11 = 8 ** np.arange(10, -1, -1, dtype=np.int64)  # (11,)
_KIND_OK = np.isin(np.arange(256), [0, 48, 55])  # (256,) type flags of a regular member: NUL, '0', '7'
_END_OK = np.isin(np.arange(256), [0, 32])  # (256,) byte 135, after the size's 11 digits: NUL or space
_MOST_PARTS = 64
"""Samples of more members than this are read one by one."""


@dataclass(frozen=True)
class Columns:
    """A micro-batch's members: ``keys[j]`` is sample ``j``'s key; part ``parts[p]``'s data is
    ``data[offsets[j, p] : offsets[j, p] + sizes[j, p]]``."""

    keys: list[str]
    parts: tuple[str, ...]
    offsets: np.ndarray  # int64[k, P]
    sizes: np.ndarray  # int64[k, P]


def _octal(fields: np.ndarray) -> np.ndarray | None:
    """Canonical octal numbers (digits, then only NUL / space): uint8[k, w] -> int64[k]; ``None`` if any is not."""
    width = fields.shape[1]
    digit = (fields >= 48) & (fields <= 55)  # (k, w)
    count = np.where(digit.all(axis=1), width, digit.argmin(axis=1))  # (k,) leading digits
    at = np.arange(width, dtype=np.int64)  # (w,)
    leading = at[None, :] < count[:, None]  # (k, w)
    if count.min() < 1 or not (leading | (fields == 0) | (fields == 32)).all():
        return None
    shift = 3 * np.clip(count[:, None] - 1 - at[None, :], 0, None)  # (k, w)
    return np.where(leading, (fields.astype(np.int64) - 48) << shift, 0).sum(axis=1)


def plain_columns(data: bytes, starts: np.ndarray, stops: np.ndarray) -> Columns | None:
    """The members of the ``k`` samples ``data[starts[j]:stops[j]]`` (int64[k] each), or ``None`` where any
    sample is not plain or the samples differ in their parts (see the module). The members are found a round
    at a time (every sample's first member, then every second, ...), each round's sizes read at once; every
    header is then checked in one numpy pass over all of them."""
    view = np.frombuffer(data, dtype=np.uint8)  # (n,)
    k = len(starts)
    at = np.asarray(starts, dtype=np.int64)  # (k,) each sample's next member header
    stops = np.asarray(stops, dtype=np.int64)  # (k,)
    rounds: list[np.ndarray] = []  # per round, int64[k] header offsets
    sizes_by_round: list[np.ndarray] = []  # per round, int64[k] data sizes
    while len(rounds) < _MOST_PARTS and (stops - at).min() >= BLOCK:
        digits = view[at[:, None] + _SIZE] - np.uint8(48)  # (k, 11) a digit's value; 8 or more (wrapped) if none
        if digits.max() > 7:
            return None  # not 11 octal digits (a shorter field, base-256, damage): the per-sample path
        size = digits @ _POW8_11  # (k,) int64
        rounds.append(at)
        sizes_by_round.append(size)
        at = at + ((size + (2 * BLOCK - 1)) & -BLOCK)  # (k,) past the header and the data's blocks
    if not rounds or (at != stops).any():
        return None  # a member past its sample, stray bytes after the last, samples differ in members, or none
    parts = len(rounds)
    at_ = np.stack(rounds, axis=1).reshape(-1)  # (m,) m = k * P, sample by sample
    sizes = np.stack(sizes_by_round, axis=1)  # (k, P)
    aligned = len(view) % BLOCK == 0 and not (at_ % BLOCK).any()  # tar members are: a header is a row
    block = view.reshape(-1, BLOCK)[at_ // BLOCK] if aligned else view[at_[:, None] + _AT]  # (m, 512)
    if not _headers_ok(block):
        return None
    name = block[:, :100]  # (m, 100)
    nul = name == 0
    length = np.where(nul.any(axis=1), nul.argmax(axis=1), 100)  # (m,) each name's length
    first = [split_name(bytes(name[p, : length[p]]).decode("utf-8", "surrogateescape")) for p in range(parts)]
    if any(split is None for split in first):
        return None  # a member Energon skips, or one without a part: the per-sample path
    found = tuple(split[1] for split in first)  # type: ignore[index]
    suffixes = [("." + part).encode("utf-8", "surrogateescape") for part in found]
    if len(set(found)) != parts or any(len(suffix) > 99 for suffix in suffixes):
        return None  # a part twice
    lengths = length.reshape(k, parts)  # (k, P)
    key_len = lengths[:, 0] - len(suffixes[0])  # (k,) if every sample's first member is part 0
    if (lengths != key_len[:, None] + np.array([len(x) for x in suffixes])).any() or key_len.min() < 1:
        return None
    names3 = name.reshape(k, parts, 100)  # (k, P, 100)
    if ((names3 != names3[:, :1]) & (_NAME < key_len[:, None, None])).any():
        return None  # a sample with two keys
    width = max(len(x) for x in suffixes)
    wanted = np.zeros((parts, width), dtype=np.uint8)  # (P, width) each part's "." + name
    for p, suffix in enumerate(suffixes):
        wanted[p, : len(suffix)] = np.frombuffer(suffix, dtype=np.uint8)
    tails = names3[
        np.arange(k)[:, None, None],
        np.arange(parts)[None, :, None],
        np.minimum(key_len[:, None, None] + np.arange(width), 99),
    ]
    if ((tails != wanted) & (np.arange(width) < lengths[:, :, None] - key_len[:, None, None])).any():
        return None  # samples differ in their parts (or their order)
    if not _keys_ok(names3[:, 0], key_len):
        return None
    offsets = (at_ + BLOCK).reshape(k, parts)  # (k, P)
    keys = _keys(data, rounds[0].tolist(), key_len.tolist())
    return Columns(keys, found, offsets, sizes)


def _headers_ok(block: np.ndarray) -> bool:
    """Checksums hold; sizes end at byte 135 (NUL or space after 11 digits); plain regular members, no ustar
    name prefix. block: uint8[m, 512]"""
    field = block[:, 148:156]  # (m, 8)
    digits = field[:, :6] - np.uint8(48)  # (m, 6) a digit's value; 8 or more (wrapped) if none
    if digits.max() <= 7 and not field[:, 6].any():
        stored = digits @ _POW8  # (m,) "%06o\0 ", as tarfile and GNU tar write it
    else:
        stored = _octal(field)
    if stored is None:
        return False
    total = block.sum(axis=1, dtype=np.uint32) - field.sum(axis=1, dtype=np.uint32) + 8 * 32  # (m,) field as spaces
    if not (stored == total).all() or not _KIND_OK[block[:, 156]].all() or not _END_OK[block[:, 135]].all():
        return False
    return not block[:, 345].any() or not ((block[:, 345] != 0) & (block[:, 257:262] == _USTAR).all(axis=1)).any()


def _keys_ok(names: np.ndarray, key_len: np.ndarray) -> bool:
    """Every key's last path component is non-empty and dot-free (so the name splits there), and no name
    starts ``__`` (Energon skips some). names: uint8[k, 100], key_len: int64[k]"""
    in_key = _NAME < key_len[:, None]  # (k, 100)
    if (names[:, :2] == 95).all(axis=1).any():
        return False
    slash = (names == 47) & in_key
    if not slash.any():  # keys without a folder: the whole key is the last component
        return not ((names == 46) & in_key).any()
    last = np.where(slash.any(axis=1), 99 - slash[:, ::-1].argmax(axis=1), -1)  # (k,)
    dotted = ((names == 46) & in_key & (_NAME > last[:, None])).any()
    return not (dotted or (key_len <= last + 1).any())


def _keys(data: bytes, heads: list[int], key_len: list[int]) -> list[str]:
    """Each sample's key: the first ``key_len[j]`` bytes of the name at ``heads[j]``, as text (UTF-8,
    undecodable bytes kept as surrogates), decoded together."""
    raw = [data[h : h + n] for h, n in zip(heads, key_len)]
    keys = b"\n".join(raw).decode("utf-8", "surrogateescape").split("\n")
    if len(keys) != len(raw):  # a key holding a newline
        keys = [key.decode("utf-8", "surrogateescape") for key in raw]
    return keys
