"""A source over any Python sequence: lists, numpy arrays, HF datasets, torch map-style datasets.

A sequence has no file whose size or bytes could tell one content from another, so its checkpoint
fingerprint carries a *content digest*: BLAKE2b (8 bytes) over the length and :data:`SAMPLED` items
at fixed positions spread evenly over the sequence (the first and the last included; every item when
there are fewer), each serialised by :func:`encode`.  It is computed once per source, on its first
fingerprint (``loader.state_dict()`` or ``load_state_dict``), in the main process, by reading those
items, the first of them twice: a sequence that returns another item the second time (random
augmentation inside ``__getitem__``) cannot be fingerprinted; it is recorded without a content
digest (as before the digest existed: name and length only) and a warning says so.

What it protects, and what it can miss:

- a sequence with other items at any of the sampled positions is refused on restore (``dataset``
  differs: its ``content``); with the same name and length, that is what other content usually is;
- a change at positions that are not sampled (one item edited among many, items swapped between
  two unsampled positions) is not seen;
- items are serialised by value: ``None``, booleans, integers, floats, strings, bytes, lists,
  tuples, dicts and sets (recursively; dict and set order does not matter), numpy arrays and
  scalars, torch tensors (dtype, shape, bytes; on the CPU), PIL images (mode, size, pixels) and
  dataclasses (class name and fields).  A buffer over 1 MiB contributes its size and three 64 KiB
  blocks (start, middle, end).  Any other object contributes its class name only (its value is not
  seen); nesting past 32 levels, or an item of more than 100,000 values, is cut there.  An item whose
  read raises contributes the exception's class name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import struct
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import OptionError
from .base import Source

log = logging.getLogger("datareel")

SAMPLED = 32
"""Items a content digest reads: evenly spread over the sequence, the first and the last included."""
BIG = 1 << 20
"""Buffers longer than this contribute their size and three blocks of :data:`BLOCK` bytes."""
BLOCK = 1 << 16
MAX_DEPTH = 32
MAX_VALUES = 100_000
"""Values one item may contribute (containers and their elements); the rest is cut."""


def sample_positions(size: int) -> list[int]:
    """The positions a content digest reads: ``min(size, SAMPLED)`` evenly spread over ``[0, size)``."""
    k = min(size, SAMPLED)
    return [0] if k == 1 else [i * (size - 1) // (k - 1) for i in range(k)]


def content_digest(seq: Any, size: int) -> str | None:
    """16 hex digits over ``size`` and the items at :func:`sample_positions` (see the module doc), or
    ``None`` when the first item reads differently twice (the sequence is not a function of the index)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(b"datareel.sequence.v1:%d:" % size)
    positions = sample_positions(size)
    first = _item(seq, positions[0])
    if _item(seq, positions[0]) != first:
        return None
    for position in positions:
        digest.update(first if position == positions[0] else _item(seq, position))
    return digest.hexdigest()


def _item(seq: Any, position: int) -> bytes:
    """The digest of one item's :func:`encode` (32 bytes): what a position contributes."""
    out = hashlib.blake2b(digest_size=32)
    try:
        value = seq[position]
    except Exception as exc:  # a sample that cannot be read: its error's class is what it is
        out.update(b"E" + _name(type(exc)).encode())
        return out.digest()
    encode(value, out)
    return out.digest()


def encode(value: Any, out: Any) -> None:
    """Feed a stable serialisation of ``value`` to ``out`` (a hashlib object): the same bytes for equal
    values in any process (see the module doc for the types read by value)."""
    _Encoder(out).add(value, 0)


class _Encoder:
    def __init__(self, out: Any):
        self.out = out
        self.values = 0

    def tag(self, tag: bytes, *parts: bytes) -> None:
        self.out.update(tag)
        for part in parts:
            self.out.update(struct.pack("<Q", len(part)))
            self.out.update(part)

    def buffer(self, tag: bytes, data: Any) -> None:
        try:
            view = memoryview(data).cast("B")
        except TypeError:  # a strided view: its bytes in order
            view = memoryview(bytes(memoryview(data)))
        size = len(view)
        if size <= BIG:
            self.tag(tag, bytes(view))
            return
        middle = (size - BLOCK) // 2
        self.tag(
            tag + b"~",
            str(size).encode(),
            bytes(view[:BLOCK]),
            bytes(view[middle : middle + BLOCK]),
            bytes(view[-BLOCK:]),
        )

    def add(self, value: Any, depth: int) -> None:
        self.values += 1
        if depth > MAX_DEPTH or self.values > MAX_VALUES:
            self.tag(b"...")
            return
        if value is None:
            self.tag(b"N")
        elif isinstance(value, bool):
            self.tag(b"T" if value else b"F")
        elif isinstance(value, int):
            self.tag(b"i", value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True))
        elif isinstance(value, float):
            self.tag(b"f", (value.hex() if not math.isnan(value) else "nan").encode())
        elif isinstance(value, str):
            self.tag(b"s", value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, (bytes, bytearray, memoryview)):
            self.buffer(b"b", value)
        elif isinstance(value, Mapping):
            self.unordered(b"d", [(k, v) for k, v in value.items()], depth)
        elif isinstance(value, (list, tuple)):
            self.tag(b"l" if isinstance(value, list) else b"t", str(len(value)).encode())
            for item in value:
                self.add(item, depth + 1)
        elif isinstance(value, (set, frozenset)):
            self.unordered(b"e", [(item, None) for item in value], depth)
        elif self.array(value, depth) or self.tensor(value) or self.image(value):
            pass
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            self.tag(b"c", _name(type(value)).encode())
            for field in dataclasses.fields(value):
                self.tag(b"k", field.name.encode())
                self.add(getattr(value, field.name, None), depth + 1)
        else:  # an object datareel cannot serialise stably (its repr may hold an address): its class only
            self.tag(b"o", _name(type(value)).encode())

    def unordered(self, tag: bytes, pairs: list[tuple[Any, Any]], depth: int) -> None:
        """A mapping or a set: each entry digested on its own, the digests sorted (order does not count)."""
        entries = []
        for key, item in pairs:
            sub = hashlib.blake2b(digest_size=16)
            encoder = _Encoder(sub)
            encoder.values = self.values
            encoder.add(key, depth + 1)
            encoder.add(item, depth + 1)
            self.values = encoder.values
            entries.append(sub.digest())
        self.tag(tag, str(len(entries)).encode(), *sorted(entries))

    def array(self, value: Any, depth: int) -> bool:
        numpy = sys.modules.get("numpy")
        if numpy is None or not isinstance(value, (numpy.ndarray, numpy.generic)):
            return False
        array = numpy.asarray(value)
        shape = ",".join(map(str, array.shape)).encode()
        if array.dtype.hasobject:  # objects: element by element
            self.tag(b"A", shape)
            self.add(array.tolist(), depth + 1)
        else:
            self.tag(b"a", array.dtype.str.encode(), shape)
            self.buffer(b"", numpy.ascontiguousarray(array).view(numpy.uint8).reshape(-1))
        return True

    def tensor(self, value: Any) -> bool:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(value, torch.Tensor):
            return False
        try:
            flat = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            data = flat.numpy()
        except Exception:  # sparse, quantized, meta, ...: its kind and shape only
            self.tag(b"X", str(value.dtype).encode(), str(tuple(value.shape)).encode(), str(value.layout).encode())
            return True
        self.tag(b"x", str(value.dtype).encode(), str(tuple(value.shape)).encode())
        self.buffer(b"", data)
        return True

    def image(self, value: Any) -> bool:
        pil = sys.modules.get("PIL.Image")
        if pil is None or not isinstance(value, pil.Image):
            return False
        try:
            pixels = value.tobytes()
        except Exception:  # a lazy image whose file is gone: its mode and size only
            pixels = b""
        self.tag(b"p", value.mode.encode(), str(value.size).encode())
        self.buffer(b"", pixels)
        return True


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class SequenceSource(Source):
    """Wraps an object with ``__len__`` and ``__getitem__(int)``."""

    def __init__(self, seq: Any, *, name: str | None = None, fingerprint: bool | str = True):
        if not (hasattr(seq, "__len__") and hasattr(seq, "__getitem__")):
            raise OptionError(
                f"from_sequence needs an object with __len__ and __getitem__, got "
                f"{type(seq).__name__}; wrap an iterable with list(...) first, or use "
                f"datareel.open_dataset for files"
            )
        size = len(seq)
        if size < 1:
            raise OptionError(
                f"from_sequence got an empty {type(seq).__name__} (len 0); a dataset needs at least one sample"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise OptionError(f"name={name!r} must be a non-empty string or None")
        if not (isinstance(fingerprint, bool) or (isinstance(fingerprint, str) and fingerprint)):
            raise OptionError(
                f"fingerprint={fingerprint!r} must be True (a digest of sampled items), False (name and length "
                f"only) or a non-empty string naming the content (e.g. a dataset version)"
            )
        self.seq = seq
        self.name = name if name is not None else "sequence"
        self._size = size
        self._fingerprint = fingerprint
        self._content: str | None | bool = False  # False: not computed yet

    def __len__(self) -> int:
        return self._size

    def read(self, index: int) -> Any:
        return self.seq[int(index)]

    def content_digest(self) -> str | None:
        """The content digest the checkpoint fingerprint carries (see the module doc); computed once."""
        if self._content is False:
            if self._fingerprint is False:
                self._content = None
            elif isinstance(self._fingerprint, str):
                blob = b"datareel.sequence.named:" + self._fingerprint.encode("utf-8", "surrogatepass")
                self._content = hashlib.blake2b(blob, digest_size=8).hexdigest()
            else:
                self._content = content_digest(self.seq, self._size)
                if self._content is None:
                    log.warning(
                        "from_sequence(name=%r): item %d read twice gave two different items (random augmentation "
                        "in __getitem__?), so checkpoints cannot check this sequence's content, only its name and "
                        "length; pass fingerprint='<a version of the data>' to from_sequence to name it instead",
                        self.name,
                        sample_positions(self._size)[0],
                    )
        return self._content  # type: ignore[return-value]


def from_sequence(seq: Any, *, name: str | None = None, fingerprint: bool | str = True) -> SequenceSource:
    """Make a dataset of any sequence.

    ``seq`` needs ``len(seq)`` and ``seq[i]``: a list, a numpy array (rows are
    samples), a Hugging Face ``datasets.Dataset``, a map-style
    ``torch.utils.data.Dataset``.  ``name`` (default ``"sequence"``) keys the
    shuffle and goes into checkpoints, so two sources in one run need two
    names, and renaming a source invalidates its checkpoints.

    A checkpoint records the sequence's name, its length and (``fingerprint=True``, the default) a
    digest of 32 items read at fixed positions spread evenly over it (the first and the last
    included; all items of a shorter sequence), so restoring into a sequence with other items there
    is refused.  A change only at positions that are not sampled is not seen.  Items are serialised
    by value for ``None``, numbers, strings, bytes, lists, tuples, dicts, sets, numpy arrays, torch
    tensors, PIL images and dataclasses (a buffer over 1 MiB by its size and three 64 KiB blocks);
    any other object by its class name only.  The items are read once, in the main process, at the
    first ``state_dict()`` or ``load_state_dict()``; a sequence whose ``seq[i]`` differs from one
    read to the next (random augmentation in ``__getitem__``) is recorded without the digest, with a
    warning.  ``fingerprint="v3"`` (any string naming the content, such as a dataset version) is
    recorded instead of reading items; ``fingerprint=False`` records the name and length only.

    Example::

        >>> import datareel
        >>> ds = datareel.from_sequence([{"text": "a"}, {"text": "b"}], name="toy")
        >>> len(ds), ds.read(1)
        (2, {'text': 'b'})
    """
    return SequenceSource(seq, name=name, fingerprint=fingerprint)
