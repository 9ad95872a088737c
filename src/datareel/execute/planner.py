"""The windowed stage's planner: one window of inputs -> its units (outputs, or online packs).

For each input position of the window (in order) it reads the sample and runs
the encoder's first stage (``preencode_sample``, else ``encode_sample``) under
the position's seed, exactly as a worker will; the outputs of the window are
the concatenation.  With online packing the user's ``select_samples_to_pack``
gets that list (under a seed keyed by the window) and its groups become the
window's packs; without, each output is a unit of its own.  Inputs that yield nothing (a generator that yields nothing,
``SkipSample``, or a failure while a ``handler`` is set or ``on_error`` is
``"substitute"``) and outputs no pack selects are left out and counted; the
failures go back with the plan, and the handler is told of them in the
training process, once per window.

The planner is what a background planning process runs; it holds the sources
and the encoder, never the loader.  It is a :class:`~datareel.reel.window.WindowPlanner` like any
other: the window reel streams its units, and its ``spec`` is the state's ``spec.stage``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ..errors import DatareelError, DatasetChangedError, StorageError, is_skip, picklable, sample_failure
from ..plan.rng import DOMAIN_SELECT
from ..reel.planner import WindowPlan, WindowPlanner
from ..reel.units import Units
from ..reel.windowed import WindowedStage
from ..sources.source_info import failure_records, note_records
from .batch import BatchMaker
from .randomness import sample_context
from .threads import Outcome

log = logging.getLogger("datareel")
#: Window inputs announced to the sources at a time (buckets fetch them together; bounds what is held).
PREFETCH = 64


class EncoderPlanner(WindowPlanner):
    """Plans windows of ``stage`` with a :class:`~.batch.BatchMaker`'s reading and encoding (``stage.pack``:
    online packing)."""

    def __init__(self, maker: BatchMaker, stage: WindowedStage):
        self.maker, self.stage, self.pack = maker, stage, stage.pack

    def spec(self) -> dict[str, Any]:
        """The window, the packing mode and the encoder class: never a plan (saving or restoring must not
        plan windows besides the cursor's)."""
        encoder = self.maker.encoder.encoder
        cls = type(encoder)
        return {"stage": self.stage.to_json(None if encoder is None else f"{cls.__module__}.{cls.__qualname__}")}

    def stalled(self, window: int, empty: int) -> None:
        raise DatareelError(
            f"the windowed stage produced no output in {empty} consecutive windows (up to reel position "
            f"{(window + 1) * self.stage.window}): the encoder skips (or select_samples_to_pack leaves out) every "
            f"sample; check encode_sample / select_samples_to_pack"
        )

    def __call__(self, window: int, positions: np.ndarray, source_ids: np.ndarray, indices: np.ndarray) -> WindowPlan:
        started = time.perf_counter()
        encoded: list[Any] = []
        owner: list[int] = []  # owner[j]: the window input output j came from
        number: list[int] = []  # number[j]: which of that input's outputs it is
        empty = 0
        failures: list[tuple[BaseException, str]] = []
        inputs = list(zip(positions.tolist(), source_ids.tolist(), indices.tolist()))
        made: list[Outcome] | None = None  # with the threaded map: this chunk's first stages, made by the threads
        for j, (p, s, i) in enumerate(inputs):
            if j % PREFETCH == 0:
                self.maker.read_ahead(source_ids[j : j + PREFETCH], indices[j : j + PREFETCH])
                if self.maker.threads is not None:
                    made = self.maker.threads.map(lambda m: self.maker.first_stage(*m), inputs[j : j + PREFETCH])
            outputs = self._outputs(window, p, s, i, failures, None if made is None else made[j % PREFETCH])
            empty += not outputs
            encoded += outputs
            owner += [j] * len(outputs)
            number += range(len(outputs))
        groups = self._select(window, encoded) if self.pack else [[j] for j in range(len(encoded))]
        owners = np.asarray(owner, dtype=np.int64)
        left_out = len(encoded) - sum(len(g) for g in groups)
        units = Units.of(
            groups, positions[owners], source_ids[owners], indices[owners],
            outputs=np.asarray(number, dtype=np.int64), packs=self.pack, planned=True,
        )  # fmt: skip
        return WindowPlan(units, empty + left_out, time.perf_counter() - started, failures)

    def _outputs(
        self,
        window: int,
        position: int,
        source_id: int,
        index: int,
        failures: list[tuple[BaseException, str]],
        made: Outcome | None = None,
    ) -> list[Any]:
        """The input's outputs (``made``: its first stage, made by a thread), or none: skipped, or failed and
        noted for the handler; else what stops the planning raises."""
        maker = self.maker
        try:
            return maker.first_stage(position, source_id, index) if made is None else made.get()
        except Exception as exc:
            if is_skip(exc):
                return []
            if not sample_failure(exc) and not isinstance(exc, DatasetChangedError):  # never left out: stop
                refused = maker.refused(position, source_id, index, exc)
                raise StorageError(f"planning window {window}: {refused}") from exc
            where = maker._where(position, source_id, index)
            if not sample_failure(exc) or (maker.options.handler is None and maker.options.on_error == "raise"):
                raise DatareelError(f"planning window {window}: {where} failed: {exc!r}") from exc
            failed = picklable(exc)
            note_records(failed, failure_records(exc, maker.sources[source_id], index))  # for handlers
            failures.append((failed, maker._key(source_id, index)))
            return []

    def report(self, window: int, plan: WindowPlan) -> None:
        handler = self.maker.options.handler
        for exc, key in plan.notes or ():
            if handler is not None:
                handler(exc, key)  # may raise: then the loader stops with it, as in Energon
            log.warning("planning window %d: sample %r failed (%r); it is left out", window, key, exc)
        if plan.skipped:
            log.debug("the windowed stage left out %d items of window %d", plan.skipped, window)

    def _select(self, window: int, encoded: list[Any]) -> list[list[int]]:
        """``select_samples_to_pack`` over the window's outputs, as lists of output numbers."""
        maker = self.maker
        reseed = maker.options.reseed_global or "select_samples_to_pack" in maker.encoder.reseeds
        with sample_context(maker.options.seed, window, reseed_global=reseed, domain=DOMAIN_SELECT):
            chosen = maker.encoder.select_samples_to_pack(list(encoded)) if encoded else []
        where = {id(sample): j for j, sample in enumerate(encoded)}
        used: set[int] = set()
        groups = []
        for group in chosen:
            numbers = [where.get(id(sample), -1) for sample in group]
            if -1 in numbers or len(set(numbers)) < len(numbers) or used & set(numbers):
                raise DatareelError(
                    f"planning window {window}: select_samples_to_pack returned a pack with a sample that is not "
                    f"among its input samples, or one used twice; return lists of the samples it was given, each "
                    f"at most once"
                )
            used.update(numbers)
            if numbers:
                groups.append(numbers)
        return groups
