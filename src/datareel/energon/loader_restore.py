"""``restore_sample`` for a facade loader: a batch made again from its ``__restore_key__``.

A datareel batch is a pure function of its reel positions, so its restore key names them:
``("Reel", start, stop)``, this rank's positions ``[start, stop)`` of one micro-step (stamped on
every typed batch, and on every sample of a ``batch_size=None`` loader, as it is handed out).
:meth:`SampleRestorer.restore` resolves the positions through the loader's plan and runs the same
batch maker on them: the same samples, the same per-sample randomness, the same batch — on any
topology, before or after a restore.  Only the plain reel maps positions to samples directly; a
loader that packs, or plans a generator ``encode_sample``'s outputs per window, cannot restore a
batch alone (``can_restore_sample()`` is ``False`` there).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import OptionError
from ..execute.batch import BatchMaker, ExecOptions
from ..execute.encoder import ResolvedEncoder
from ..loader import Loader
from ..reel.base import Descriptor
from ..reel.plain import PlainReel
from .unbatched import One, unwrap

KIND = "Reel"


def stamp_key(batch: Any, start: int, stop: int) -> None:
    """Give a typed batch (or the sample of a ``batch_size=None`` loader) its restore key, in place."""
    target = batch.sample if type(batch) is One else batch
    if dataclasses.is_dataclass(target) and not isinstance(target, type) and hasattr(target, "__restore_key__"):
        try:
            target.__restore_key__ = (KIND, int(start), int(stop))
        except (AttributeError, dataclasses.FrozenInstanceError):
            pass  # a frozen batch keeps the key its encoder gave it


def val_key(batch: Any) -> Any:
    """A val batch's restore key as a tuple, as Energon's (``("Val", *its samples' keys)``: a val loader in
    Energon's order cannot restore a batch alone; ``can_restore_sample()`` says so)."""
    if dataclasses.is_dataclass(batch) and isinstance(getattr(batch, "__restore_key__", None), list):
        try:
            batch.__restore_key__ = ("Val", *batch.__restore_key__)
        except (AttributeError, dataclasses.FrozenInstanceError):
            pass
    return batch


def next_span(loader: Loader) -> tuple[int, int]:
    """This rank's positions ``[start, stop)`` in the micro-step the loader hands out next."""
    return loader.layout.rank_span(0, loader.rank, loader.length, loader.cursor)


class SampleRestorer:
    """Makes a train loader's batches again from their restore keys (see the module docstring)."""

    def __init__(self, loader: Loader, encoder: Any, seed: int, on_error: str, handler: Any):
        self.loader = loader
        self.plain = isinstance(loader.reel, PlainReel)
        self._args = (encoder, seed, on_error, handler)
        self._maker: BatchMaker | None = None

    def restore(self, key: Any) -> Any:
        if not self.plain:
            raise OptionError(
                "restore_sample: this loader packs samples or plans a generator encode_sample's outputs per window, "
                "so a batch cannot be made apart from its window; can_restore_sample() is False here"
            )
        if not (isinstance(key, (tuple, list)) and len(key) == 3 and key[0] == KIND):
            raise OptionError(
                f"restore_sample({key!r}): a datareel.energon restore key is ('{KIND}', start, stop), the "
                f"__restore_key__ of a batch this loader handed out (a key made by megatron.energon does not name "
                f"datareel's reel positions)"
            )
        start, stop = int(key[1]), int(key[2])
        if not 0 <= start < stop:
            raise OptionError(f"restore_sample({key!r}): positions [{start}, {stop}) name no samples")
        positions = np.arange(start, stop, dtype=np.int64)  # (k,)
        source_ids, indices = self.loader.plan.resolve(positions)  # (k,) each
        step = start // self.loader.layout.step_size
        batch = self._batch_maker()[Descriptor(step, positions, source_ids, indices)]
        stamp_key(batch, start, stop)
        return unwrap(batch)

    def _batch_maker(self) -> BatchMaker:
        if self._maker is None:
            encoder, seed, on_error, handler = self._args
            options = ExecOptions.of(seed, False, on_error, None, handler)
            self._maker = BatchMaker(self.loader.sources, ResolvedEncoder(encoder), options)
        return self._maker
