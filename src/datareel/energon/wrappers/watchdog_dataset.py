"""Energon's ``WatchdogDataset``: the loader's watchdog (``get_loader(watchdog_timeout_seconds=)``), also as
a wrapper a user may put around a dataset.  :meth:`WatchdogDataset._watchdog_trigger` is what fires when a
batch's ``next()`` runs past its deadline (:mod:`datareel.energon.watchdog`)."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

from ..watchdog import Watchdog


class WatchdogDataset:
    """``dataset`` with a watchdog on each batch's ``next()`` (``timeout_seconds=None``: none)."""

    def __init__(
        self,
        dataset: Any,
        worker_config: Any = None,
        timeout_seconds: float | None = 60,
        initial_timeout_seconds: float | None = None,
        fail_on_timeout: bool = False,
    ):
        self.dataset, self.worker_config = dataset, worker_config
        self.timeout_seconds, self.initial_timeout_seconds = timeout_seconds, initial_timeout_seconds
        self.fail_on_timeout = bool(fail_on_timeout)

    def _watchdog_trigger(self) -> None:
        message = f"Watchdog triggered. Sample processing took longer than {self.timeout_seconds} seconds."
        if self.fail_on_timeout:
            raise TimeoutError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    def watch(self, items: Iterator[Any]) -> Iterator[Any]:
        if self.timeout_seconds is None:
            return items
        # looked up when it fires: a patched _watchdog_trigger is the one called
        dog = Watchdog(self.timeout_seconds, self.initial_timeout_seconds, callback=lambda: self._watchdog_trigger())
        return dog.watch(items)

    def __len__(self) -> int:
        return len(self.dataset)

    def __str__(self) -> str:
        return f"WatchdogDataset(dataset={self.dataset})"


def watched(items: Iterator[Any], options: Any, spec: Any) -> Iterator[Any]:
    """One pass of a facade loader under its options: the watchdog on each ``next()``, and a
    ``gc.collect()`` every ``gc_collect_every_n_steps`` batches (Energon's loader's).  With
    ``gc_freeze_at_start`` (Energon's default) and no worker processes (where Energon freezes: in the process
    that iterates its dataset, so never the training process when it has workers) what is alive when the pass
    starts is collected once and frozen (:func:`gc.freeze`) for the pass, so each collection walks only what
    the pass made, not the training process's whole heap (0.12 s a collection in a test session's heap, 0.1 ms
    frozen).  A heap already frozen (by the user, or by another pass running) is left as it is, and so is its
    unfreezing: one pass's end never undoes a freeze it did not make."""
    if options.watchdog_timeout_seconds is not None:
        dog = WatchdogDataset(
            spec,
            getattr(spec, "worker_config", None),
            options.watchdog_timeout_seconds,
            options.watchdog_initial_timeout_seconds,
            options.fail_on_timeout,
        )
        items = dog.watch(items)
    every = options.gc_collect_every_n_steps
    workers = getattr(getattr(spec, "worker_config", None), "num_workers", 0) or 0
    return _collecting(items, every, options.gc_freeze_at_start and not workers) if every else items


def _collecting(items: Iterator[Any], every: int, freeze: bool) -> Iterator[Any]:
    freeze = freeze and gc.get_freeze_count() == 0  # not a freeze someone else made: theirs to undo
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        for n, item in enumerate(items, 1):
            yield item
            if n % every == 0:
                gc.collect()
    finally:
        if freeze:
            gc.unfreeze()
