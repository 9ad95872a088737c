"""The interface every source implements."""

from __future__ import annotations

import abc
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OptionError


class Sample(dict):
    """A sample read from disk: a dict whose keys are also attributes.

    ``sample["caption"]`` and ``sample.caption`` are the same, so task encoders
    written for Energon's sample dataclasses (``sample.image``,
    ``sample.__key__``) run on datareel samples unchanged.
    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"sample has no field {name!r} (fields: {sorted(self)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


class Source(abc.ABC):
    """A finite, random-access collection of raw samples.

    ``len(source)`` samples, read one at a time by index with :meth:`read`.
    Sources are cheap to pickle: DataLoader workers receive a copy and open
    any files lazily on first read.
    """

    name: str

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def read(self, index: int) -> Any:
        """The raw sample at ``index`` (``0 <= index < len(self)``)."""

    def read_many(self, indices: np.ndarray, block: int = 1) -> list[Any]:
        """Samples ``indices`` (int64[k]) read together where a source can do that faster; ``None`` for
        each sample left to :meth:`read` (which raises what is wrong with it). Default: all ``None``.

        ``block=k`` (only asked of a source whose ``reads_blocks`` is true, for the block shuffle): read each
        sample's block, samples ``[i - i % k, i - i % k + k)`` (cut to the source's length, and to what the
        source reads in one go), in one read, and keep the block's other samples until they are asked for.
        Sources without ``reads_blocks`` are called without ``block``, as before."""
        return [None] * len(indices)

    def read_columns(self, indices: np.ndarray) -> dict[str, list[Any]] | None:
        """Samples ``indices`` (int64[k]) as columns, where a source can read a micro-batch so: per key, in
        the samples' key order, the list of their values (what ``[read(i)[key] for i in indices]`` gives,
        value for value). ``None`` where it cannot take all of them (the loader then reads them one by one,
        under the error policy). Default: ``None``."""
        return None

    #: Whether :meth:`read_many` and :meth:`prefetch` take ``block=k`` (the block shuffle's reads).
    reads_blocks: bool = False

    #: Whether :meth:`prefetch` does anything (the loader announces micro-batches only to such sources).
    prefetches: bool = False

    def prefetch(self, indices: np.ndarray, block: int = 1) -> None:
        """A hint that samples ``indices`` (int64[k], one micro-batch) will be read next.

        Sources in buckets fetch them together here (concurrent, coalesced ranged GETs) and keep them
        until read; local sources ignore it. Must not raise: a failure is reported by :meth:`read`.
        ``block=k``: fetch the samples' blocks (see :meth:`read_many`; asked only where ``reads_blocks``)."""
        return None  # read on demand

    def key(self, index: int) -> str:
        """The sample's key without decoding it (used by filters); default: its raw ``__key__`` or index."""
        sample = self.read(index)
        if isinstance(sample, dict) and "__key__" in sample:
            return str(sample["__key__"])
        return str(index)

    # -- metadata for packing and filters (sources that know more override these) ---------------
    def byte_sizes(self, indices: np.ndarray) -> np.ndarray:
        """Bytes each sample takes on disk. indices: int64[k] -> int64[k]."""
        raise OptionError(
            f"{self.name} ({type(self).__name__}) has no byte sizes; give the lengths as a function "
            f"(length=fn(source, indices)) or as a length index"
        )

    def global_indices(self, indices: np.ndarray) -> np.ndarray:
        """Sample numbers in the order a length index stores them. int64[k] -> int64[k]."""
        raise OptionError(
            f"{self.name} ({type(self).__name__}) has no length index; give the lengths as a function "
            f"(length=fn(source, indices)), or prepare a dataset with `datareel prepare --lengths`"
        )

    def length_index_path(self) -> Path:
        raise OptionError(
            f"{self.name} ({type(self).__name__}) has no length index; give the lengths as a function "
            f"(length=fn(source, indices)), or prepare a dataset with `datareel prepare --lengths`"
        )

    def length_index_check(self) -> dict[str, Any]:
        return {}

    def describe(self) -> dict[str, Any]:
        """What identifies this source's content for checkpoint fingerprints.

        Subclasses add what they know (shard lists, split parts, ...).
        """
        return {"kind": type(self).__name__, "name": self.name, "size": len(self)}

    def content_digest(self) -> str | None:
        """A digest of the items themselves where :meth:`describe` cannot tell other content apart (a
        Python sequence has no file sizes or shard counts: see :mod:`.sequence`); ``None`` for sources whose
        description covers what they protect."""
        return None

    def fingerprint(self) -> dict[str, Any]:
        """A short summary (name, size), a digest of :meth:`describe`, and the :meth:`content_digest`
        (as ``content``) where there is one."""
        blob = json.dumps(self.describe(), sort_keys=True, default=str).encode("utf-8")
        digest = hashlib.blake2b(blob, digest_size=8).hexdigest()
        out: dict[str, Any] = {"name": shorten(self.name), "size": len(self), "digest": digest}
        content = self.content_digest()
        if content is not None:
            out["content"] = content
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, size={len(self)})"


def shorten(name: str, limit: int = 80) -> str:
    """Names go into the state verbatim up to ``limit`` characters (the digest covers the rest)."""
    return name if len(name) <= limit else name[: limit - 3] + "..."


def file_check(path: Any, count: int) -> list[Any]:
    """``[samples, bytes, digest of the first and last 64 KiB]``: what a length index must still match
    (read through the store of ``path``: a local path or a URL)."""
    import hashlib

    from ..storage import NotFound, files_for

    url = str(path)
    files = files_for(url)
    try:
        size = files.info(url).size
        digest = hashlib.blake2b(digest_size=8)
        digest.update(files.read_range(url, 0, min(size, 1 << 16)))
        digest.update(files.read_range(url, max(0, size - (1 << 16)), size))
    except NotFound:  # a shard gone: its check differs from any recorded one (named as stale)
        return [count, None, None]
    return [count, size, digest.hexdigest()]


class MappedSource(Source):
    """A source whose sample ``i`` is sample ``map(i)`` of ``base`` (views, filters)."""

    base: Source

    def _map(self, indices: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def read(self, index: int) -> Any:
        return self.base.read(int(self._map(np.array([index]))[0]))

    def key(self, index: int) -> str:
        return self.base.key(int(self._map(np.array([index]))[0]))

    def read_many(self, indices: np.ndarray) -> list[Any]:
        indices = np.asarray(indices, dtype=np.int64)
        out: list[Any] = [None] * len(indices)
        if type(self).read is not MappedSource.read:
            return out  # a subclass's own read() is what it reads with
        inside = (indices >= 0) & (indices < len(self))  # out of range: read() names it
        rows = np.flatnonzero(inside)
        for row, sample in zip(rows.tolist(), self.base.read_many(self._map(indices[rows]))):
            out[row] = sample
        return out

    def read_columns(self, indices: np.ndarray) -> dict[str, list[Any]] | None:
        indices = np.asarray(indices, dtype=np.int64)
        if type(self).read is not MappedSource.read or not len(indices):
            return None  # a subclass's own read() is what it reads with
        if indices.min() < 0 or indices.max() >= len(self):
            return None  # read() names it
        return self.base.read_columns(self._map(indices))

    def content_digest(self) -> str | None:
        return self.base.content_digest()

    @property
    def prefetches(self) -> bool:
        return self.base.prefetches

    def prefetch(self, indices: np.ndarray) -> None:
        self.base.prefetch(self._map(indices))

    def byte_sizes(self, indices: np.ndarray) -> np.ndarray:
        return self.base.byte_sizes(self._map(indices))

    def global_indices(self, indices: np.ndarray) -> np.ndarray:
        return self.base.global_indices(self._map(indices))

    def length_index_path(self) -> Path:
        return self.base.length_index_path()

    def length_index_check(self) -> dict[str, Any]:
        return self.base.length_index_check()
