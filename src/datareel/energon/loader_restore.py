"""``restore_sample`` for a facade loader: a batch made again from its ``__restore_key__``.

A datareel batch is a pure function of its address (:mod:`datareel.remake`), so its restore key names it:
``("Reel", start, stop)``, this rank's positions ``[start, stop)`` of one micro-step, and with packing or a
generator ``encode_sample`` also ``window, offset`` (its first unit's place in the window reel).  The key is
stamped on every typed batch, and on every sample of a ``batch_size=None`` loader, as it is handed out;
:meth:`SampleRestorer.restore` hands it to the core loader's :meth:`~datareel.Loader.remake`, which runs the
loader's own batch maker on it: the same samples, the same per-sample randomness, the same batch — on any
topology, before or after a restore.  A window's batch is planned by the encoder class the loader runs: after a
restore with another class (at a window's start: docs/guarantees.md), a key of an earlier window names a batch
that class plans there, which differs where the classes plan otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import OptionError
from ..loader import Loader
from ..remake import Address
from .batch_failures import is_dropped
from .unbatched import One, unwrap

KIND = "Reel"


def stamp_key(batch: Any, address: Address) -> None:
    """Give a typed batch (or the sample of a ``batch_size=None`` loader) its restore key, in place."""
    target = batch.sample if type(batch) is One else batch
    if dataclasses.is_dataclass(target) and not isinstance(target, type) and hasattr(target, "__restore_key__"):
        try:
            target.__restore_key__ = (KIND, *address.to_key())
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


class SampleRestorer:
    """Makes a train loader's batches again from their restore keys (see the module docstring)."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def restore(self, key: Any) -> Any:
        if not (isinstance(key, (tuple, list)) and len(key) in (3, 5) and key[0] == KIND):
            raise OptionError(
                f"restore_sample({key!r}): a datareel.energon restore key is ('{KIND}', start, stop[, window, "
                f"offset]), the __restore_key__ of a batch this loader handed out (a key made by megatron.energon "
                f"does not name datareel's reel positions)"
            )
        try:
            address = Address.from_key(tuple(key[1:]), self.loader.layout.step_size)
            batch = self.loader.remake(address)
        except OptionError as exc:
            raise OptionError(f"restore_sample({key!r}): {exc}") from None
        if is_dropped(batch):  # its batch / encode_batch fails: raised, as Energon's default restore handler does
            raise batch.error if batch.error is not None else OptionError(f"restore_sample({key!r}): the batch failed")
        stamp_key(batch, address)
        return unwrap(batch)
