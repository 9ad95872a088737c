"""Static filters: a mapped subset of a source, fixed before any permutation.

The predicate sees metadata only (key, length, source name, index), never a
decoded sample, so the subset is cheap to compute, is computed once when the
filter is built, and keeps the reel a pure function of the spec.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from ..errors import OptionError
from .base import MappedSource, Source
from .lengths import LengthSpec, check_spec, lengths_of


class SampleMeta:
    """What a filter predicate sees of one sample; ``key`` is read only if asked for."""

    __slots__ = ("_source", "index", "_length")

    def __init__(self, source: Source, index: int, length: int | None):
        self._source, self.index, self._length = source, index, length

    @property
    def source(self) -> str:
        return self._source.name

    @property
    def key(self) -> str:
        return self._source.key(self.index)

    @property
    def length(self) -> int:
        if self._length is None:
            raise OptionError(
                f"the filter on {self._source.name} asked for a length, but none was given: pass "
                f"datareel.filter(..., length='index' | 'bytes' | fn)"
            )
        return self._length


class FilteredSource(MappedSource):
    """The samples of ``base`` that passed the predicate, in their original order."""

    def __init__(self, base: Source, kept: np.ndarray, label: str, name: str | None = None):
        if len(kept) == 0:
            raise OptionError(f"the filter {label} keeps no sample of {base.name}")
        self.base, self.kept, self.label = base, kept, label
        self.name = name if name is not None else base.name

    def __len__(self) -> int:
        return len(self.kept)

    def _map(self, indices: np.ndarray) -> np.ndarray:
        return self.kept[np.asarray(indices, dtype=np.int64)]

    def describe(self) -> dict[str, Any]:
        digest = hashlib.blake2b(np.ascontiguousarray(self.kept).tobytes(), digest_size=8).hexdigest()
        return {
            "kind": "filter",
            "name": self.name,
            "base": self.base.describe(),
            "predicate": self.label,
            "kept": len(self.kept),
            "kept_digest": digest,
        }


def filter(
    dataset: Source,
    predicate: Callable[[SampleMeta], bool],
    *,
    length: LengthSpec | None = None,
    name: str | None = None,
    progress: bool = True,
) -> FilteredSource:
    """Keep the samples of ``dataset`` whose metadata passes ``predicate``.

    ``predicate(meta)`` gets a :class:`SampleMeta` (``meta.key``, ``meta.length``,
    ``meta.source``, ``meta.index``); ``length`` says where lengths come from
    (``"index"``, ``"bytes"`` or ``fn(source, indices)``).  The kept indices are
    computed here, once, and travel with the dataset to workers.

    Example::

        short = datareel.filter(corpus, lambda m: m.length <= 4096, length="index")
        no_test = datareel.filter(corpus, lambda m: not m.key.startswith("test/"))
    """
    if not isinstance(dataset, Source):
        raise OptionError(
            f"datareel.filter works on one dataset, got {type(dataset).__name__}; filter each source before mixing"
        )
    if not callable(predicate):
        raise OptionError(f"predicate={predicate!r} must be a function of one SampleMeta")
    n = len(dataset)
    lengths = None
    if length is not None:
        check_spec(length, "datareel.filter")
        lengths = lengths_of(dataset, np.arange(n, dtype=np.int64), length).tolist()
    keep = np.zeros(n, dtype=bool)
    for i in tqdm(range(n), desc=f"filter {dataset.name}", unit="sample", disable=not progress or n < 100_000):
        keep[i] = bool(predicate(SampleMeta(dataset, i, None if lengths is None else lengths[i])))
    label = getattr(predicate, "__qualname__", type(predicate).__name__)
    return FilteredSource(dataset, np.flatnonzero(keep).astype(np.int64), label, name)
