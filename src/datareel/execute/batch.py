"""Execution (layer 4): turn a micro-batch descriptor into a batch, in any worker.

Stateless: given the same descriptor, any worker in any process returns the
same batch, because everything it needs is in the descriptor and in the
(read-only) sources, encoder and options.

Per sample: read (and decode), attach ``__source__``, ``encode_sample`` inside
the sample's context (its RNG, optionally reseeded global RNGs).  With packing,
the encoded samples of each planned pack go to ``pack_selected_samples``.  Then
``batch`` and ``encode_batch``.

A sample that fails (read, decode or ``encode_sample``) is handled by the
error policy: ``"raise"`` names its key, source and position; ``"substitute"``
logs it and uses the first of up to 16 candidates from the same source that
works, candidate ``t`` being index ``(i + 1 + u_t) mod n`` with ``u_t`` drawn
from a generator keyed by ``(seed, position)`` — the same on every topology.
Only a failure of the sample itself is handled so (:func:`~datareel.errors.sample_failure`):
a failure of the machine or the store (too many open files, an I/O error, retries run
out, a listed shard missing) raises :class:`~datareel.errors.StorageError`, and a shard
that changed since it was prepared raises :class:`~datareel.errors.BatchError`, whatever
the policy, with no handler told — also when a substitute candidate meets it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from ..errors import (
    BatchError,
    DatasetChangedError,
    OptionError,
    StorageError,
    check_choice,
    is_skip,
    sample_failure,
)
from ..plan.rng import DOMAIN_POST, DOMAIN_SUBSTITUTE
from ..reel.base import Descriptor
from ..sources.base import Sample, Source
from .encoder import ResolvedEncoder
from .randomness import sample_context

log = logging.getLogger("datareel")
ON_ERROR = ("raise", "substitute")
SUBSTITUTE_ATTEMPTS = 16


@dataclass(frozen=True, kw_only=True)
class ExecOptions:
    """What every worker needs besides the descriptor: the seed, the randomness and error policies,
    and packing's ``max_length`` (for ``truncate_sample``)."""

    seed: int
    reseed_global: bool = False
    on_error: str = "raise"
    max_length: int | None = None
    handler: Callable[[Exception, str], Any] | None = None

    @classmethod
    def of(cls, seed: int, reseed_global: Any, on_error: Any, packing: Any, handler: Any = None) -> ExecOptions:
        """Checked options from the loader's arguments (``packing``: a Packing or None)."""
        check_choice(on_error, "on_error", ON_ERROR)
        if handler is not None and not callable(handler):
            raise OptionError(f"error_handler={handler!r} must be a function (exception, sample key) -> None")
        if handler is not None and _required_positionals(handler) >= 3:  # Energon's (exc, sample, sources)
            handler = _WithSources(handler)
        return cls(
            seed=seed,
            reseed_global=bool(reseed_global),
            on_error=on_error,
            max_length=getattr(packing, "max_length", None),
            handler=handler,
        )


def _required_positionals(fn: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


@dataclass(frozen=True)
class _WithSources:
    """A handler with Energon's three required arguments, called as ``handler(exception, key, None)``."""

    handler: Callable[..., Any]

    def __call__(self, exc: Exception, key: str) -> Any:
        return self.handler(exc, key, None)


class BatchMaker(Dataset):
    """The map-style dataset DataLoader workers index with descriptors."""

    def __init__(self, sources: Sequence[Source], encoder: ResolvedEncoder, options: ExecOptions):
        self.sources = list(sources)
        self.names = [source.name for source in self.sources]
        self.encoder = encoder
        self.options = options
        self._ready: dict[tuple[int, int], Any] = {}  # (source, index) -> raw sample read with its micro-batch

    # -- one sample -------------------------------------------------------------------------------
    def _read(self, source_id: int, index: int) -> Any:
        """The raw sample with ``__source__`` (dict samples), cooked / adopted for the encoder."""
        raw = self._ready.pop((source_id, index), None)  # read with its micro-batch, used once
        if raw is None:
            raw = self.sources[source_id].read(index)
        if isinstance(raw, dict) and "__source__" not in raw:  # a copy: never change the user's objects
            raw = (
                Sample(raw, __source__=self.names[source_id])
                if isinstance(raw, Sample)
                else {**raw, "__source__": self.names[source_id]}
            )
        return self.encoder.cook(raw)

    def _attempt(self, position: int, source_id: int, index: int) -> Any:
        """Outside the windowed stage: the first stage (exactly one output there), then ``postencode_sample``
        (if any) as output 0."""
        return self.post(position, 0, self.first_stage(position, source_id, index)[0])

    def first_stage(self, position: int, source_id: int, index: int) -> list[Any]:
        """The windowed stage's first half for one input: its outputs (raises what the sample raised)."""
        raw = self._read(source_id, index)
        reseed = self.options.reseed_global or bool({"encode_sample", "preencode_sample"} & self.encoder.reseeds)
        with sample_context(self.options.seed, position, reseed_global=reseed):
            return self.encoder.outputs(raw)

    def post(self, position: int, output: int, sample: Any) -> Any:
        """The windowed stage's second half (``postencode_sample``) for output ``output`` of ``position``."""
        if self.encoder.post is None:
            return sample
        reseed = self.options.reseed_global or "postencode_sample" in self.encoder.reseeds
        with sample_context(self.options.seed, (position << 32) | output, reseed_global=reseed, domain=DOMAIN_POST):
            return self.encoder.post(sample)

    def sample(self, position: int, source_id: int, index: int) -> Any:
        try:
            return self._attempt(position, source_id, index)
        except Exception as exc:
            if not sample_failure(exc):  # the machine, the store or the dataset: never substituted or handled
                raise self.refused(position, source_id, index, exc) from exc
            where = self._where(position, source_id, index)
            skip = is_skip(exc)  # outside the windowed stage a skip cannot shorten the reel: substitute
            if self.options.handler is not None and not skip:  # Energon's handler: told first; may raise
                try:
                    self.options.handler(exc, self._key(source_id, index))
                except Exception as raised:
                    raise BatchError(f"{where} failed: {exc}; error_handler raised {raised!r}") from raised
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

    # -- one micro-batch --------------------------------------------------------------------------
    def __getitem__(self, desc: Descriptor) -> Any:
        try:
            return self._make(desc)
        except (BatchError, StorageError):
            raise
        except Exception as exc:  # batch / encode_batch / pack_selected_samples / collation: name the step
            first, last = int(desc.positions[0]), int(desc.positions[-1])
            kind = BatchError if sample_failure(exc) else StorageError
            raise kind(
                f"micro-step {desc.step} (reel positions {first}..{last}) failed: {type(exc).__name__}: {exc}"
            ) from exc

    def prefetch(self, source_ids: np.ndarray, indices: np.ndarray) -> None:
        """Read the samples read next (a micro-batch, or a window's chunk) together where their sources can
        (:meth:`~datareel.sources.base.Source.read_many`), after telling sources in buckets to fetch them.
        A hint only: whatever goes wrong here is reported when the sample is read, under the error
        policy. source_ids, indices: int64[k]."""
        self._ready = {}  # one micro-batch's samples at most are held
        for source_id in np.unique(source_ids).tolist():
            source, mine = self.sources[source_id], np.unique(indices[source_ids == source_id])
            try:
                if source.prefetches:
                    source.prefetch(mine)
                read = source.read_many(mine)
            except Exception as exc:  # a user's source, say: the reads will tell
                log.debug("prefetch of source %s failed: %r", self.names[source_id], exc)
                continue
            for index, sample in zip(mine.tolist(), read):
                if sample is not None:
                    self._ready[source_id, index] = sample

    def _make(self, desc: Descriptor) -> Any:
        self.prefetch(desc.source_ids, desc.indices)
        if desc.outputs is not None:
            samples = self._stage_outputs(desc)
        else:
            samples = [
                self.sample(p, s, i)
                for p, s, i in zip(desc.positions.tolist(), desc.source_ids.tolist(), desc.indices.tolist())
            ]
        if desc.pack_sizes is not None:
            samples = self._pack(desc, samples)
        reseed = bool({"batch", "encode_batch"} & self.encoder.reseeds)
        first = int(desc.packed_positions[0] if desc.packed_positions is not None else desc.positions[0])
        with sample_context(self.options.seed, first, pack=True, reseed_global=reseed):
            batch = self.encoder.encode_batch(self.encoder.batch(samples))
        if isinstance(batch, dict):
            if desc.pack_sizes is None:
                batch.setdefault("__source__", [self.names[i] for i in desc.source_ids.tolist()])
                # numpy crosses the worker queue as plain bytes; the loader makes it a tensor on arrival
                # (a tensor would travel through a shared-memory segment per batch: ~40% of throughput)
                # a windowed stage numbers its outputs (an input may give several, or none)
                batch.setdefault("__positions__", desc.positions if desc.outputs is None else desc.packed_positions)
            else:
                cuts = np.cumsum(desc.pack_sizes)[:-1]
                batch.setdefault("__packs__", [p.tolist() for p in np.split(desc.positions, cuts)])
                batch.setdefault(
                    "__source__", [[self.names[i] for i in s.tolist()] for s in np.split(desc.source_ids, cuts)]
                )
                batch.setdefault("__positions__", desc.packed_positions)
        return batch

    def _stage_outputs(self, desc: Descriptor) -> list[Any]:
        """The planned outputs of a windowed stage's descriptor, post-encoded (each input encoded once)."""
        made: dict[int, list[Any]] = {}
        out = []
        for p, s, i, k in zip(
            desc.positions.tolist(), desc.source_ids.tolist(), desc.indices.tolist(), desc.outputs.tolist()
        ):
            if p not in made:
                try:
                    made[p] = self.first_stage(p, s, i)
                except Exception as exc:
                    if not sample_failure(exc):
                        raise self.refused(p, s, i, exc) from exc
                    raise BatchError(
                        f"{self._where(p, s, i)} failed in a worker although it was planned: {exc}"
                    ) from exc
            if k >= len(made[p]):
                raise BatchError(
                    f"{self._where(p, s, i)}: the encoder gave {len(made[p])} outputs in a worker but more when the "
                    f"window was planned; encode_sample must depend only on the sample and its seeded randomness"
                )
            out.append(self.post(p, k, made[p][k]))
        return out

    def _pack(self, desc: Descriptor, samples: list[Any]) -> list[Any]:
        truncate = getattr(self.encoder.encoder, "truncate_sample", None)
        if desc.truncate is not None and desc.truncate.any():
            samples = [
                truncate(s, self.options.max_length) if t else s for s, t in zip(samples, desc.truncate.tolist())
            ]
        out, start = [], 0
        for packed_position, size in zip(desc.packed_positions.tolist(), desc.pack_sizes.tolist()):
            with sample_context(
                self.options.seed,
                packed_position,
                pack=True,
                reseed_global=self.options.reseed_global or "pack_selected_samples" in self.encoder.reseeds,
            ):
                out.append(self.encoder.pack_selected_samples(samples[start : start + size]))
            start += size
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ready": {}}

    def __len__(self) -> int:  # DataLoader never needs it (it is fed by a sampler)
        raise TypeError("BatchMaker is indexed by descriptors and has no length")
