"""Energon's batch grouping (``batch_group_criterion``) as the core's online packing: each unit is one batch.

A task encoder that overrides ``batch_group_criterion(sample) -> (key, batch_size)`` gets batches whose
samples share a key (aspect-ratio or length buckets).  Energon fills one bucket per key as samples stream
by and hands a bucket out when it is full, so which samples meet depends on the worker's stream.  Here a
window of the reel (:data:`WINDOW` inputs, or ``packing_buffer_size``) is encoded by the windowed stage's
planner, its outputs are put in buckets by the criterion in reel order, and each bucket is cut into batches
of its size — a full one wherever it fills, the rest of each bucket at the window's end (shorter, never
dropped, never carried into the next window: a restore plans one window).  Each batch is one unit of the
window reel, so the micro-batch is one unit (``batch_size`` of the loader is 1) and grouped batches restore
on any topology like packs (docs/guarantees.md).

:class:`Grouped` is the user's encoder as the core runs it: ``encode_sample`` (after the cookers, as
:class:`~.unbatched.Unbatched`), ``select_samples_to_pack`` (the buckets), ``pack_selected_samples`` (the
user's ``batch`` then ``encode_batch``) and a one-unit ``batch`` that hands the unit out as it is.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..errors import OptionError
from ..execute.encoder import ResolvedEncoder, _overrides
from .unbatched import Hook, One, _reseeds

WINDOW = 256
"""Inputs per planning window when the loader has no ``packing_buffer_size``: buckets fill within it."""


def groups_batches(encoder: Any) -> bool:
    """Whether ``encoder`` overrides Energon's ``batch_group_criterion`` (batches grouped by the data)."""
    return encoder is not None and _overrides(encoder, "batch_group_criterion")


class Grouped:
    """The user's task encoder with ``batch_group_criterion`` run as online packing (see the module doc)."""

    def __init__(self, encoder: Any, batch_size: int | None):
        resolved = ResolvedEncoder(encoder, grouped=True)  # the user's hooks, checked (refusals name them)
        if resolved.windowed:
            raise OptionError(
                f"task encoder {type(encoder).__name__}: batch_group_criterion with a generator encode_sample is "
                f"not supported; return one sample from encode_sample"
            )
        cook = resolved.cook if (resolved.cookers or resolved.sample_classes) else None
        self.encode_sample = Hook(resolved.first, _reseeds(resolved, "encode_sample", "preencode_sample"), cook)
        if resolved.post is not None:
            self.postencode_sample = Hook(resolved.post, "postencode_sample" in resolved.reseeds)
        self.select_samples_to_pack = Hook(self._buckets, False)
        self.pack_selected_samples = Hook(self._batch, _reseeds(resolved, "batch", "encode_batch"))
        self.criterion = encoder.batch_group_criterion
        self.fixed = batch_size
        self._user_batch, self._user_encode_batch = resolved.batch, resolved.encode_batch
        self.task_encoder = encoder

    def _buckets(self, samples: list[Any]) -> list[list[Any]]:
        """The window's outputs in buckets by the criterion, cut into batches of each bucket's size."""
        open_: dict[Hashable, list[Any]] = {}
        sizes: dict[Hashable, int] = {}
        out: list[list[Any]] = []
        for sample in samples:
            key, size = self._criterion(sample)
            if sizes.setdefault(key, size) != size:
                raise OptionError(
                    f"batch_group_criterion gave bucket {key!r} batch size {size} after {sizes[key]}; a bucket's "
                    f"size must not change (Energon's rule)"
                )
            bucket = open_.setdefault(key, [])
            bucket.append(sample)
            if len(bucket) == size:
                out.append(open_.pop(key))
        return out + list(open_.values())  # the rest of each bucket, shorter, in the order the buckets opened

    def _criterion(self, sample: Any) -> tuple[Hashable, int]:
        got = self.criterion(sample)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise OptionError(f"batch_group_criterion returned {got!r}; return (bucket key, batch size or None)")
        key, size = got
        size = self.fixed if size is None else size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise OptionError(
                f"batch_group_criterion gave bucket {key!r} the batch size {size!r}; return a positive int, or "
                f"None with a batch_size given to get_*_dataset"
            )
        return key, size

    def _batch(self, samples: list[Any]) -> Any:
        return self._user_encode_batch(self._user_batch(samples))

    def batch(self, units: list[Any]) -> Any:
        if len(units) != 1:
            raise OptionError(f"a grouped batch is one unit of the reel: micro_batch_size=1, not {len(units)}")
        return units[0]

    def encode_batch(self, batch: Any) -> Any:
        return One(batch)  # handed out as the user's encode_batch made it
