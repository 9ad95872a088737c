"""Execution (layer 4): turn a micro-batch descriptor into a batch, in any worker.

Stateless: given the same descriptor, any worker in any process returns the
same batch, because everything it needs is in the descriptor and in the
(read-only) sources, encoder and options.

One code path for every reel: a descriptor is a list of units, each a pack or a
single sample (see :class:`~datareel.reel.base.Descriptor`).  Per member: read (and
decode), attach ``__source__``, ``encode_sample`` (or the planned output of the
first stage, then ``postencode_sample``) inside the sample's context (its RNG,
optionally reseeded global RNGs).  Each unit that is a pack goes to
``pack_selected_samples``; the others are their one member.  Then ``batch`` and
``encode_batch``.

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

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from ..errors import BatchError, OptionError, StorageError, sample_failure
from ..plan.rng import DOMAIN_POST
from ..reel.base import Descriptor
from ..sources.base import Sample, Source
from .ahead import Lookahead
from .columnar import batch_from_columns, columnar
from .encoder import ResolvedEncoder
from .options import ON_ERROR, ExecOptions
from .randomness import sample_context
from .sample_policy import SUBSTITUTE_ATTEMPTS, SamplePolicy
from .threads import ThreadMap, planned_stages

__all__ = ["ON_ERROR", "SUBSTITUTE_ATTEMPTS", "BatchMaker", "ExecOptions"]  # ExecOptions: its import path before
log = logging.getLogger("datareel")


class BatchMaker(SamplePolicy, Dataset):
    """The map-style dataset DataLoader workers index with descriptors."""

    def __init__(self, sources: Sequence[Source], encoder: ResolvedEncoder, options: ExecOptions):
        self.sources = list(sources)
        self.names = [source.name for source in self.sources]
        self.encoder = encoder
        self.options = options
        self._ready: dict[tuple[int, int], Any] = {}  # (source, index) -> raw sample read with its micro-batch
        self.threads = ThreadMap(options.map_threads) if options.map_threads else None  # the threaded map
        self.lookahead = Lookahead(*options.ahead) if options.ahead is not None else None
        self.blocks = dict(options.read_blocks)  # source id -> samples per block (BlockShuffle)
        self.columnar = columnar(encoder, options)  # plain micro-batches may be made from columns (.columnar)

    def replaced(self, **changes: Any) -> BatchMaker:
        """This maker with some of its options changed (its sources and encoder shared), e.g. a copy that
        reads without threads or look-ahead (:mod:`datareel.remake`)."""
        return BatchMaker(self.sources, self.encoder, dataclasses.replace(self.options, **changes))

    # -- one sample -------------------------------------------------------------------------------
    def _read(self, source_id: int, index: int) -> Any:
        """The raw sample with ``__source__`` (dict samples), cooked / adopted for the encoder."""
        raw = self._ready.pop((source_id, index), None)  # read with its micro-batch, used once
        if raw is None:
            raw = self.sources[source_id].read(index)
        if isinstance(raw, dict) and "__source__" not in raw and self.encoder.annotate:  # a copy, not the user's
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

    def first_stage(self, position: int, source_id: int, index: int, first_unit: int | None = None) -> list[Any]:
        """The windowed stage's first half for one input: its outputs (raises what the sample raised);
        ``first_unit``: the reel position of its first output, where a micro-batch is made of them."""
        raw = self._read(source_id, index)
        reseed = self.options.reseed_global or bool({"encode_sample", "preencode_sample"} & self.encoder.reseeds)
        with sample_context(self.options.seed, position, reseed_global=reseed, first_unit=first_unit):
            return self.encoder.outputs(raw)

    def post(self, position: int, output: int, sample: Any) -> Any:
        """The windowed stage's second half (``postencode_sample``) for output ``output`` of ``position``."""
        if self.encoder.post is None:
            return sample
        reseed = self.options.reseed_global or "postencode_sample" in self.encoder.reseeds
        with sample_context(self.options.seed, (position << 32) | output, reseed_global=reseed, domain=DOMAIN_POST):
            return self.encoder.post(sample)

    # -- one micro-batch --------------------------------------------------------------------------
    def __getitem__(self, desc: Descriptor) -> Any:
        try:
            return self._make(desc)
        except (BatchError, StorageError):
            raise
        except Exception as exc:  # batch / encode_batch / pack_selected_samples / collation: name the step
            if getattr(exc, "_datareel_from_handler", False):
                raise
            first, last = int(desc.positions[0]), int(desc.positions[-1])
            kind = BatchError if sample_failure(exc) else StorageError
            raise kind(
                f"micro-step {desc.step} (reel positions {first}..{last}) failed: {type(exc).__name__}: {exc}"
            ) from exc

    def prefetch(
        self, source_ids: np.ndarray, indices: np.ndarray, ahead: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        """Read the samples read next (a micro-batch, or a window's chunk) together where their sources can
        (:meth:`~datareel.sources.base.Source.read_many`), after telling sources in buckets to fetch them.
        A hint only: whatever goes wrong here is reported when the sample is read, under the error
        policy. A source the block shuffle reads in blocks of ``k`` (``options.read_blocks``) that reads blocks
        (``reads_blocks``) is asked with ``block=k``. source_ids, indices: int64[k]. ``ahead``: ``(source_ids,
        indices)`` of micro-batches made later by this process; block sources in buckets start fetching their
        blocks in the background (``fetch_ahead``, bounded bytes)."""
        self._ready = {}  # one micro-batch's samples at most are held
        blocks = self.blocks
        for source_id in np.unique(source_ids).tolist():
            source, mine = self.sources[source_id], np.unique(indices[source_ids == source_id])
            k = blocks.get(source_id, 1) if getattr(source, "reads_blocks", False) else 1
            try:
                if k > 1:
                    if source.prefetches:
                        source.prefetch(mine, block=k)
                    read = source.read_many(mine, block=k)
                else:  # as every source takes it (one without block= too)
                    if source.prefetches:
                        source.prefetch(mine)
                    read = source.read_many(mine)
            except Exception as exc:  # a user's source, say: the reads will tell
                if isinstance(exc, OptionError):  # configuration is never a hint's to swallow (datareel.settings)
                    raise
                log.debug("prefetch of source %s failed: %r", self.names[source_id], exc)
                continue
            for index, sample in zip(mine.tolist(), read):
                if sample is not None:
                    self._ready[source_id, index] = sample
        for source_id in np.unique(ahead[0]).tolist() if ahead is not None else ():
            source, k = self.sources[source_id], blocks.get(source_id, 1)
            if k > 1 and source.prefetches and hasattr(source, "fetch_ahead"):
                source.fetch_ahead(np.unique(ahead[1][ahead[0] == source_id]), k)  # never raises

    def read_ahead(self, source_ids: np.ndarray, indices: np.ndarray, ahead: Any = None) -> None:
        """Before the samples ``indices`` of ``source_ids`` (int64[k]) are made: :meth:`prefetch`; with the
        threaded map, only the samples of sources in buckets are fetched so (their bytes together; each is decoded
        by its thread), the others are read by the threads, and each source is first used in this process by the
        calling thread (a reader makes its per-process handles then, before threads share them)."""
        if self.threads is None:
            return self.prefetch(source_ids, indices, ahead)
        for source_id, index in zip(source_ids.tolist(), indices.tolist()):
            if self.threads.first_use(source_id):
                try:
                    self.sources[source_id].key(index)
                except Exception:  # the read tells, under the error policy
                    pass
        # sources in buckets and block sources are fetched together here too (a block: one read)
        fetched = np.asarray([self.sources[s].prefetches or s in self.blocks for s in source_ids.tolist()], dtype=bool)
        self.prefetch(source_ids[fetched], indices[fetched], ahead)

    def _make(self, desc: Descriptor) -> Any:
        if self.columnar:
            made = batch_from_columns(self.sources, self.names, desc)
            if made is not None:
                return made
        ahead = self.lookahead.ahead(desc.positions) if self.lookahead is not None and not desc.planned else None
        self.read_ahead(desc.source_ids, desc.indices, ahead)
        units = self._units(desc, self._members(desc))
        reseed = bool({"batch", "encode_batch"} & self.encoder.reseeds)
        with sample_context(self.options.seed, int(desc.units[0]), pack=True, reseed_global=reseed):
            batch = self.encoder.encode_batch(self.encoder.batch(units))
        if isinstance(batch, dict) and self.encoder.annotate:
            # numpy crosses the worker queue as plain bytes; the loader makes it a tensor on arrival
            # (a tensor would travel through a shared-memory segment per batch: ~40% of throughput)
            names = [self.names[i] for i in desc.source_ids.tolist()]
            if desc.packs.any():
                cuts = np.cumsum(desc.sizes)[:-1]
                batch.setdefault("__packs__", [p.tolist() for p in np.split(desc.positions, cuts)])
                starts = [0, *cuts.tolist(), len(names)]
                batch.setdefault("__source__", [names[a:b] for a, b in zip(starts, starts[1:])])
            else:
                batch.setdefault("__source__", names)
            batch.setdefault("__positions__", desc.units)  # each unit's reel position
        return batch

    def _members(self, desc: Descriptor) -> list[Any]:
        """Each member's sample: under the error policy, or (``planned``) the planned output of its input's
        first stage (each input encoded once), then ``postencode_sample``; cut where ``truncate`` says."""
        made: dict[int, list[Any]] = {}  # position -> its first stage's outputs (planned members)
        cut = getattr(self.encoder.encoder, "truncate_sample", None)
        members = list(zip(desc.positions.tolist(), desc.source_ids.tolist(), desc.indices.tolist()))
        outputs = desc.outputs.tolist()
        threaded = self._threaded(members, outputs, desc.planned)
        out = []
        # one unit per member (a generator's outputs, not packed): output k of input p is unit units[j], so the
        # input's first output is units[j] - k (what current_batch_index reads while the generator runs)
        units = desc.units.tolist() if not desc.packs.any() else None
        for j, ((p, s, i), k, t) in enumerate(zip(members, outputs, desc.truncate.tolist())):
            if desc.planned:
                first = units[j] - k if units is not None else None
                sample = self._planned(made, p, s, i, k, threaded, first)
            else:
                sample = self.sample(p, s, i, threaded[j] if threaded is not None else None)
            out.append(cut(sample, self.options.max_length) if t else sample)
        return out

    def _threaded(self, members: list[tuple[int, int, int]], outputs: list[int], planned: bool) -> Any:
        """With the threaded map, each member's first attempt, made by the threads: an :class:`Outcome` per
        member; planned, per input position, the first stage's and each wanted output's ``postencode_sample``
        outcomes. ``None`` without threads (each is made when the member is taken, in this thread)."""
        if self.threads is None:
            return None
        if not planned:
            return self.threads.map(lambda m: self._attempt(*m), members)
        return planned_stages(self.threads, self.first_stage, self.post, members, outputs)

    def _planned(
        self, made: dict[int, list[Any]], p: int, s: int, i: int, k: int, threaded: Any = None, first: int | None = None
    ) -> Any:
        """Output ``k`` of input ``p``'s first stage, post-encoded, as the window's plan found it (``threaded``:
        both made by the threads, see :meth:`_threaded`; ``first``: the reel position of its first output)."""
        if p not in made:
            try:
                made[p] = self.first_stage(p, s, i, first) if threaded is None else threaded[p][0].get()
            except Exception as exc:
                if not sample_failure(exc):
                    raise self.refused(p, s, i, exc) from exc
                raise BatchError(f"{self._where(p, s, i)} failed in a worker although it was planned: {exc}") from exc
        if k >= len(made[p]):
            raise BatchError(
                f"{self._where(p, s, i)}: the encoder gave {len(made[p])} outputs in a worker but more when the "
                f"window was planned; encode_sample must depend only on the sample and its seeded randomness"
            )
        return self.post(p, k, made[p][k]) if threaded is None else threaded[p][1][k].get()

    def _units(self, desc: Descriptor, members: list[Any]) -> list[Any]:
        """Each unit: its members through ``pack_selected_samples`` (a pack, under the unit's seed), else its
        one member."""
        reseed = self.options.reseed_global or "pack_selected_samples" in self.encoder.reseeds
        out, start = [], 0
        for position, size, packs in zip(desc.units.tolist(), desc.sizes.tolist(), desc.packs.tolist()):
            group, start = members[start : start + size], start + size
            if not packs:
                out.append(group[0])
                continue
            if self.encoder.pack_selected_samples is None:
                raise BatchError(f"unit {position} is a pack: that needs task_encoder.pack_selected_samples(samples)")
            with sample_context(self.options.seed, position, pack=True, reseed_global=reseed):
                out.append(self.encoder.pack_selected_samples(group))
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ready": {}}

    def __len__(self) -> int:  # DataLoader never needs it (it is fed by a sampler)
        raise TypeError("BatchMaker is indexed by descriptors and has no length")
