"""One sample under the error policy (a mixin of :class:`~.batch.BatchMaker`; see :mod:`.batch` for the policy).

``raise`` names the failing sample's key, source and position; ``substitute`` tells the handler, logs, and uses
the first of up to :data:`SUBSTITUTE_ATTEMPTS` candidates from the same source that works, candidate ``t`` being
index ``(i + 1 + u_t) mod n`` with ``u_t`` drawn from a generator keyed by ``(seed, position)``.  A failure of the
machine or the store is never handled so (:meth:`SamplePolicy.refused`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..errors import BatchError, DatasetChangedError, StorageError, is_skip, sample_failure
from ..plan.rng import DOMAIN_SUBSTITUTE
from ..sources.source_info import failure_records, note_records
from .threads import Outcome

log = logging.getLogger("datareel")
SUBSTITUTE_ATTEMPTS = 16


class SamplePolicy:
    """The error policy for one sample at a reel position (see the module docstring)."""

    sources: list[Any]
    names: list[str]
    options: Any

    # and BatchMaker's _attempt(position, source_id, index): one try at the sample

    def sample(self, position: int, source_id: int, index: int, made: Outcome | None = None) -> Any:
        """The sample at ``position`` under the error policy (``made``: its first attempt, made by a thread)."""
        try:
            return self._attempt(position, source_id, index) if made is None else made.get()
        except Exception as exc:
            if not sample_failure(exc):  # the machine, the store or the dataset: never substituted or handled
                raise self.refused(position, source_id, index, exc) from exc
            where = self._where(position, source_id, index)
            skip = is_skip(exc)  # outside the windowed stage a skip cannot shorten the reel: substitute
            if self.options.handler is not None and not skip:
                # Energon's handler: told first.  If it raises, its own exception stops the loader (as in
                # Energon, and as the windowed stage's planner does): the user chose that type to catch.
                try:
                    # where it was read (SourceInfo records), for handlers that report it (Energon's `sources`)
                    note_records(exc, failure_records(exc, self.sources[source_id], index))
                    self.options.handler(exc, self._key(source_id, index))
                except Exception as raised:
                    raised._datareel_from_handler = True  # type: ignore[attr-defined]  # __getitem__ lets it by
                    raise
            if self.options.on_error == "raise" and not skip:
                raise BatchError(f"{where} failed: {exc}") from exc
            n = len(self.sources[source_id])
            rng = np.random.Generator(
                np.random.PCG64(np.random.SeedSequence([DOMAIN_SUBSTITUTE, self.options.seed, position]))
            )
            for _ in range(SUBSTITUTE_ATTEMPTS if n > 1 else 0):
                candidate = (index + 1 + int(rng.integers(0, n - 1))) % n
                try:
                    sample = self._attempt(position, source_id, candidate)
                except Exception as other:
                    if not sample_failure(other):  # no substitute is made from a failing environment either
                        raise self.refused(position, source_id, candidate, other) from other
                    continue
                log.warning(
                    "%s %s (%r); substituted sample index %d of the same source",
                    where,
                    "was skipped" if skip else "failed",
                    exc,
                    candidate,
                )
                return sample
            raise BatchError(
                f"{where} failed: {exc}; and no substitute among {SUBSTITUTE_ATTEMPTS} candidates "
                f"of the same source worked"
            ) from exc

    def refused(self, position: int, source_id: int, index: int, exc: BaseException) -> Exception:
        """The error that stops the run for a failure that is not the sample's (see
        :func:`~datareel.errors.sample_failure`): a :class:`BatchError` for a shard that changed since it was
        prepared (as before: the micro-batch counts as consumed), else a :class:`StorageError` (it does not:
        ``iter(loader)`` makes it again once the cause is fixed). Its key is not read: that may fail alike."""
        if isinstance(exc, DatasetChangedError):
            return BatchError(f"{self._where(position, source_id, index)} failed: {exc}")
        return StorageError(
            f"{self.place(position, source_id, index)} failed: {type(exc).__name__}: {exc} (a failure of the "
            f"machine or the store, not of the sample: it is neither substituted nor given to an error handler)"
        )

    def place(self, position: int, source_id: int, index: int) -> str:
        """Where a sample is, without reading it: its index, its source and its reel position."""
        return f"sample index {index} of source {self.sources[source_id].name!r} at reel position {position}"

    def _key(self, source_id: int, index: int) -> str:
        try:
            return self.sources[source_id].key(index)
        except Exception:
            return "?"

    def _where(self, position: int, source_id: int, index: int) -> str:
        key, name = self._key(source_id, index), self.sources[source_id].name
        return f"sample {key!r} (index {index}) of source {name!r} at reel position {position}"
