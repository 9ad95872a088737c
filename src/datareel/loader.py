"""The Loader (layer 5): feeds this rank's micro-batch descriptors to a torch DataLoader.

The loader owns one :class:`~datareel.reel.Cursor`: how far all ranks together
have consumed the reel.  It advances only when its iterator hands a batch to
the caller (taking the batch's cursor from the iteration's queue), so
prefetched batches never count; after a restore they are simply made again.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from . import dist
from .blend.build import build_plan
from .blend.tree import Blend
from .errors import BatchError, DatareelError, check_int
from .execute.encoder import positions_tensor
from .execute.workers import (
    WORKER_DEATHS,
    WorkerOptions,
    dead_workers,
    end_with_this_process,
    widen_result_pipe,
)
from .groups import GlobalBatch, global_batches
from .pipeline import build
from .plan.layout import Layout
from .plan.schedule import BatchSchedule, RampUp
from .reel import Cursor, CursorQueue, Packing, WindowedStage
from .reel.sampler import DescriptorSampler
from .resume import restore_layout
from .sources.base import Source
from .sources.sequence import from_sequence
from .state import make_state

log = logging.getLogger("datareel")


class Loader:
    """Iterates this rank's micro-batches of a deterministic, topology-free reel.

    Global batch ``b`` is always reel positions ``[b G, (b + 1) G)`` (``[S_b, S_b + G_b)`` under a
    schedule, below); rank ``r`` reads ``m`` of them per micro-step (see :mod:`datareel.plan.layout`).  The
    state saved by :meth:`state_dict` restores on any world size, worker count
    and micro-batch size whose product ``m W`` divides the rest of the current
    global batch.  ``global_batch_size`` may be a schedule (:class:`~datareel.RampUp`, Megatron's
    ramp-up, or ``[(from_global_batch, G), ...]``): global batch ``b`` is then ``[S_b, S_b + G_b)``,
    and :attr:`accumulation_steps`, :attr:`at_global_batch_boundary` and :meth:`global_batches`
    say where each optimizer step ends (docs/batch-schedules.md).

    Arguments: ``dataset`` is a :class:`~datareel.Source` or blend (any other
    sequence is wrapped with :func:`~datareel.from_sequence`); ``rank``/``world_size``
    default to ``data_parallel_group``'s (or the default process group's) when
    torch.distributed is initialised, else ``0``/``1``; ``repeat=False`` reads one
    pass; ``packing`` plans packs from lengths (:class:`~datareel.Packing`); ``stage`` plans encoder
    outputs or online packs per window (:class:`~datareel.WindowedStage`; the default for a generator
    ``encode_sample``); ``on_error``
    (``"raise"`` / ``"substitute"``) handles a failing sample, after ``error_handler(exception,
    key)`` if given (it may raise to stop) — only a failure of the sample itself (its bytes, its
    decoding, the encoder on its content; :func:`datareel.errors.sample_failure` decides): a failure
    of the machine or the store (an ``OSError`` with an errno such as EMFILE, EIO, ENOSPC or EACCES, a
    refused or timed-out connection, a bucket's retries run out, a shard the index lists gone
    missing) raises :class:`~datareel.errors.StorageError` whatever the policy, tells no handler and
    leaves the micro-batch unconsumed (``iter(loader)`` makes it again), and a shard truncated or
    changed since ``prepare`` raises :class:`~datareel.BatchError`;
    ``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers``,
    ``multiprocessing_context`` and ``timeout`` go to the
    ``torch.utils.data.DataLoader`` and may change freely between save and restore.

    Example::

        loader = datareel.Loader(data, global_batch_size=32, micro_batch_size=4, seed=1, num_workers=2)
        batches = iter(loader)                               # next(batches) per micro-step
        torch.save(loader.state_dict(), "loader.pt")         # or json.dump: < 1 KB
        loader.load_state_dict(torch.load("loader.pt", weights_only=True))  # any world size / workers
    """

    def __init__(
        self,
        dataset: Source | Blend | Any,
        *,
        global_batch_size: int | RampUp | Sequence[tuple[int, int]] | BatchSchedule,
        micro_batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        task_encoder: Any = None,
        repeat: bool = True,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
        timeout: float = 0.0,
        data_parallel_group: Any = None,
        packing: Packing | None = None,
        stage: WindowedStage | None = None,
        reseed_global_rng: bool = False,
        on_error: str = "raise",
        error_handler: Any = None,
    ):
        if not isinstance(dataset, (Source, Blend)):
            dataset = from_sequence(dataset)
        self.dataset, self.seed = dataset, check_int(seed, "seed", maximum=(1 << 64) - 1)
        self.shuffle, self.repeat, self.group = bool(shuffle), bool(repeat), data_parallel_group
        self.rank, world_size = dist.rank_and_world(rank, world_size, data_parallel_group)
        self.layout = Layout(
            global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, world_size=world_size
        )
        self.workers = WorkerOptions(
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            timeout=timeout,
            multiprocessing_context=multiprocessing_context,
        )
        self.plan, self.sources = build_plan(dataset, seed=self.seed, shuffle=self.shuffle)
        self.packing = packing
        pipeline = build(
            self.plan,
            self.sources,
            name=dataset.name,
            seed=self.seed,
            repeat=self.repeat,
            task_encoder=task_encoder,
            packing=packing,
            stage=stage,
            reseed_global_rng=reseed_global_rng,
            on_error=on_error,
            error_handler=error_handler,
            num_workers=num_workers,
            multiprocessing_context=multiprocessing_context,
        )
        self.reel, self._maker = pipeline.reel, pipeline.maker
        self._cursor = self.reel.start()
        self.pending = CursorQueue()  # cursors of the batches the current iterator has not handed out yet
        self._generation = 0
        self._iterators: weakref.WeakSet[_LoaderIterator] = weakref.WeakSet()  # live ones: close() stops their workers
        self._dataloader: DataLoader | None = None

    # -- topology and progress -------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def micro_batch_size(self) -> int:
        return self.layout.micro_batch_size

    @property
    def global_batch(self) -> int:
        """The global batch the next micro-batch belongs to (when :attr:`at_global_batch_boundary`, the number
        of global batches completed, i.e. optimizer steps taken; after a pass that ended inside a global
        batch, the one after it)."""
        schedule, cursor = self.layout.schedule, self.cursor
        b = schedule.batch_at(cursor)
        if schedule.start(b) != cursor and self.reel.at_end(self._cursor):
            b += 1  # the pass ended inside global batch b: that (partial) batch is done
        return b

    @property
    def at_global_batch_boundary(self) -> bool:
        """Whether the micro-batches handed out so far end a global batch: right after a ``next()``, the
        micro-batch just received is the last of its global batch (step the optimizer after it).  Also
        true once a ``repeat=False`` pass has been consumed to its end.  The last, partial micro-step of
        such a pass may give a rank nothing (docs/guarantees.md): that rank's previous micro-batch is then
        not flagged, and its iterator ends (``StopIteration``) where the others read one more, as with
        any uneven end of data (DDP's ``join()`` handles it)."""
        if self.reel.at_end(self._cursor):
            return True
        cursor = self.cursor
        return self.layout.schedule.start(self.layout.schedule.batch_at(cursor)) == cursor

    @property
    def global_batch_size(self) -> int:
        """``G`` of the current global batch (:attr:`global_batch`); constant unless a schedule was given."""
        return self.layout.schedule.size(self.global_batch)

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per rank in the current global batch: ``G_b / (m W)`` (Megatron's
        ``get_num_microbatches()``)."""
        return self.accumulation_steps_at(self.global_batch)

    def global_batch_size_at(self, b: int) -> int:
        """``G_b``: the size of global batch ``b`` under the loader's schedule."""
        return self.layout.schedule.size(check_int(b, "b"))

    def accumulation_steps_at(self, b: int) -> int:
        """``G_b / (m W)``: micro-batches per rank in global batch ``b``."""
        return self.layout.accumulation_steps_at(check_int(b, "b"))

    @property
    def schedule(self) -> BatchSchedule:
        """The global batch sizes, resolved (``start(b)``, ``size(b)``, ``batch_at(position)``)."""
        return self.layout.schedule

    @property
    def length(self) -> int | None:
        """Positions (packs, with packing) in one pass of a ``repeat=False`` loader; ``None`` if endless."""
        return self.reel.length()

    @property
    def dropped(self) -> int:
        """Samples the packing's over-length policy dropped so far (each planned window counted once)."""
        return self.reel.dropped

    @property
    def cursor(self) -> int:
        """Reel positions (packs) consumed by all ranks together: a prefix ``[0, cursor)``."""
        return self._cursor.position

    @property
    def reel_cursor(self) -> Cursor:
        """The full cursor: with packing also the ``(window, offset)`` of the next pack."""
        return self._cursor

    # -- iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if not self.reel.at_end(self._cursor):  # before any data moves: every batch ahead is whole micro-steps
            self.layout.check_sizes(self.global_batch, until=self.reel.bound())
        self._generation += 1
        return _LoaderIterator(self, self._generation)

    def __len__(self) -> int:
        """Micro-batches this rank still yields (``repeat=False`` only)."""
        length = self.length
        if length is None:
            raise TypeError("a Loader with repeat=True is infinite and has no len()")
        return self.layout.rank_steps(self.rank, length, self.cursor)

    def global_batches(self) -> Iterator[GlobalBatch]:
        """This rank's micro-batches grouped by global batch: one :class:`GlobalBatch` (an iterator of
        micro-batches) per optimizer step, however the schedule sizes them.

        Example::

            for group in loader.global_batches():
                for micro_batch in group:             # group.accumulation_steps of them (fewer: the rest
                    loss(micro_batch).backward()      # of a global batch restored mid-way, or a pass's end)
                optimizer.step(); optimizer.zero_grad()

        Each group must be consumed before the next is asked for (a group left half-read would leave its
        micro-batches to the next optimizer step); the iterator raises :class:`DatareelError` instead.
        """
        return global_batches(self)

    def _get_dataloader(self) -> DataLoader:
        persistent = getattr(self._dataloader, "_iterator", None)  # torch's kept iterator (persistent_workers)
        if persistent is not None and dead_workers(persistent):  # a worker died between iterations
            with contextlib.suppress(Exception):
                persistent._shutdown_workers()
            self._dataloader = None
        if self._dataloader is None:
            sampler = DescriptorSampler(self, quiet=WORKER_DEATHS.outside)
            self._dataloader = self.workers.dataloader(self._maker, sampler, seed=self.seed)
        return self._dataloader

    def _discard_workers(self) -> None:
        """Forget the DataLoader after a worker failure: the next ``iter()`` starts new workers (a
        persistent DataLoader would otherwise reuse the broken ones), and older iterators refuse."""
        self._generation += 1
        self._dataloader = None

    def close(self) -> None:
        """Stop worker processes (those of live iterators too) and a planning process (also done when the
        loader is garbage-collected)."""
        self._generation += 1
        self._dataloader = None
        for iterator in list(self._iterators):
            iterator.stop_workers()
        getattr(self.reel, "close", lambda: None)()

    # -- state ---------------------------------------------------------------------------------------
    def _spec(self, layout: Layout | None = None) -> dict[str, Any]:
        spec = {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "global_batch_size": (layout or self.layout).schedule.spec(),
            "dataset": self.dataset.fingerprint(),
        }
        return {**spec, **self.reel.spec()}

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint: JSON-serialisable, identical on every rank, < 1 KB."""
        return make_state(self._cursor, self._spec())

    def load_state_dict(self, state: dict[str, Any], *, allow_batch_size_change: bool = False) -> None:
        """Continue from a saved state, on this loader's topology.

        Raises :class:`~datareel.StateMismatchError` if the state belongs to
        another spec and :class:`~datareel.TopologyError` (a ``ValueError``) if
        ``m W`` cannot split the rest of the current global batch.  Iterators
        made before the call stop working; call ``iter()`` again.

        ``allow_batch_size_change=True`` accepts a state saved with another global batch size or
        schedule, at a global-batch boundary of the saved one: the run continues at the same cursor
        (the same remaining samples, none repeated or skipped) cut by this loader's schedule, from the
        saved run's global batch number on.  See docs/guarantees.md.
        """
        layout, cursor = restore_layout(self, state, allow_batch_size_change)
        self.reel.check(cursor, layout)
        self._generation += 1
        self.layout, self._cursor = layout, cursor

    def save_state_global(self, dst_rank: int = 0) -> dict[str, Any] | None:
        """Collective: gather every rank's state, refuse if they differ, return it on ``dst_rank``
        (a rank of the data-parallel group; others get ``None``).  See :func:`datareel.dist.save_global`."""
        return dist.save_global(self, dst_rank)

    def restore_state_global(
        self, state: dict[str, Any] | None, src_rank: int | None = 0, *, allow_batch_size_change: bool = False
    ) -> None:
        """Collective: restore ``src_rank``'s state on every rank (``src_rank=None``: every rank passes
        the same state).  See :func:`datareel.dist.restore_global`."""
        dist.restore_global(self, state, src_rank, allow_batch_size_change=allow_batch_size_change)

    # Energon's names for state_dict / load_state_dict.
    save_state_rank = state_dict
    restore_state_rank = load_state_dict


class _LoaderIterator:
    """One pass over the loader from its cursor at creation; sets the cursor on each hand-out.

    Only a batch returned by :meth:`__next__` counts.  Anything else that ends a ``next()`` (a worker that
    died, however: killed, ``os._exit``, a crash; torch's ``timeout``; ``KeyboardInterrupt``; a failing
    reel) leaves the cursor where it was and ends this iterator (the DataLoader may have consumed a
    descriptor it never returned): a new ``iter(loader)`` makes that micro-batch again.  A worker's death
    is reported inside ``next()`` only (:class:`~datareel.execute.workers.WorkerDeaths`), never in the
    training step, where torch's signal handler would raise it after the batch was handed out.
    """

    def __init__(self, loader: Loader, generation: int):
        self.loader, self.generation = loader, generation
        self.queue = loader.pending = CursorQueue()  # read by the sampler when the DataLoader starts it
        try:
            dataloader = loader._get_dataloader()
            end_with_this_process(dataloader)  # workers started now end with this process, however it ends
            self.inner = iter(dataloader)
        except BaseException:  # e.g. persistent workers that did not resume: the next iter() starts fresh ones
            loader._dataloader = None
            raise
        self.workers = hasattr(self.inner, "_workers")  # torch's multi-process iterator
        if self.workers:
            WORKER_DEATHS.install(self.inner)  # torch installs its SIGCHLD handler when it starts its first workers
        self.deaths = WORKER_DEATHS.deaths
        widen_result_pipe(self.inner)
        loader._iterators.add(self)

    def __iter__(self) -> _LoaderIterator:
        return self

    def stop_workers(self) -> None:
        """Stop this iterator's worker processes now, not whenever the garbage collector finds it (a
        process forked meanwhile would inherit the iterator and complain when it collects it)."""
        shutdown = getattr(self.inner, "_shutdown_workers", None)  # torch's multi-process iterator
        if shutdown is not None:
            with contextlib.suppress(Exception):
                shutdown()
        self.inner = iter(())

    def __next__(self) -> Any:
        loader = self.loader
        if loader._generation != self.generation:
            raise DatareelError(
                "this iterator was made before load_state_dict(), close() or a newer iter(loader); "
                "call iter(loader) again to continue from the loader's cursor"
            )
        try:
            if self.deaths != WORKER_DEATHS.deaths:  # a worker died while the training loop ran: ours?
                self.deaths = WORKER_DEATHS.deaths
                dead = dead_workers(self.inner)
                if dead:
                    raise RuntimeError(f"DataLoader worker process ended unexpectedly: {dead}")
            waiting = self.workers and WORKER_DEATHS.wait()
            try:
                batch = next(self.inner)
            finally:
                WORKER_DEATHS.done(waiting)
        except StopIteration:
            if self.queue.end is not None:  # a finite pass ended: every rank ends at the same cursor
                loader._cursor = self.queue.end
            raise
        except BatchError:  # this micro-batch failed in the making: it counts as consumed (a caller going on skips it)
            loader._cursor = self.queue.take()
            raise
        except BaseException as exc:  # a worker died or timed out, an interrupt, ...: the DataLoader is broken
            loader._discard_workers()
            self.stop_workers()
            note = (
                f"datareel: this iterator ended ({type(exc).__name__}) and the loader dropped its worker processes; "
                f"the micro-batch it was making does not count as consumed: call iter(loader) again to continue "
                f"from cursor {loader.cursor} (nothing handed out is lost or repeated) with fresh workers"
            )
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(note)
            else:
                log.error("%s", note)
            raise
        if isinstance(batch, dict) and isinstance(batch.get("__positions__"), np.ndarray):
            batch["__positions__"] = positions_tensor(batch["__positions__"])
        loader._cursor = self.queue.take()
        return batch
