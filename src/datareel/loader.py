"""The Loader (layer 5): the PyTorch face of a :class:`~datareel.run.Run`, made from its arguments by :mod:`.assemble`.

It answers from its current run (cursor, global batch, state) and iterates it through a torch DataLoader
(:mod:`.iteration`), which moves the cursor only when a batch is handed out: prefetched batches never count.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from . import dist
from .assemble import assemble
from .blend.tree import Blend
from .groups import GlobalBatch, global_batches
from .iteration import Driver, LoaderIterator
from .iteration import answer_from_run as _of_run
from .options import LoaderOptions, signature
from .remake import Address, Remaker, next_address
from .sources.base import Source

__all__ = ["GlobalBatch", "Loader"]


class Loader:
    """Iterates this rank's micro-batches of a deterministic, topology-free reel.

    Global batch ``b`` is always reel positions ``[b G, (b + 1) G)`` (``[S_b, S_b + G_b)`` under a schedule,
    below); rank ``r`` reads ``m`` of them per micro-step (see :mod:`datareel.plan.layout`).  The state saved by
    :meth:`state_dict` restores on any world size, worker count and micro-batch size whose product ``m W``
    divides the rest of the current global batch.  ``global_batch_size`` may be a schedule
    (:class:`~datareel.RampUp`, Megatron's ramp-up, or ``[(from_global_batch, G), ...]``): global batch ``b`` is
    then ``[S_b, S_b + G_b)``, and :attr:`accumulation_steps`, :attr:`at_global_batch_boundary` and
    :meth:`global_batches` say where each optimizer step ends (docs/batch-schedules.md).

    Arguments (every option is a field of :class:`datareel.options.LoaderOptions`, this signature's one source):
    ``dataset`` is a :class:`~datareel.Source` or blend (any other sequence is wrapped with
    :func:`~datareel.from_sequence`); ``micro_batch_size`` (``m``) is what one rank reads per micro-step; ``seed``
    keys the shuffle and every sample's randomness; ``task_encoder`` turns samples into batches
    (:class:`~datareel.execute.encoder.TaskEncoder`: ``encode_sample``, ``batch``, ``encode_batch``, ...);
    ``reseed_global_rng`` reseeds ``random`` / numpy / torch per sample as :func:`datareel.sample_rng` is keyed;
    ``rank``/``world_size`` default to ``data_parallel_group``'s (or the default process group's) when
    torch.distributed is initialised, else ``0``/``1``; ``shuffle`` is ``True`` (the full shuffle), ``False`` (the
    reel in order; a numpy bool counts as the bool it holds) or a :class:`~datareel.BlockShuffle` instance (the
    locality shuffle, docs/locality.md), and anything else (the class ``BlockShuffle`` itself, ``"block"``, a number
    such as ``16`` or ``1``, ``None``) raises :class:`~datareel.errors.OptionError` naming the argument meant;
    ``repeat`` (``False``: one pass) repeats the reel; ``packing`` plans packs from lengths
    (:class:`~datareel.Packing`); ``stage`` plans encoder outputs or online packs per window
    (:class:`~datareel.WindowedStage`, the default for a generator ``encode_sample``; or your own
    :class:`~datareel.reel.Stage`, docs/stages.md); ``on_error`` (``"raise"`` / ``"substitute"``) handles a failing
    sample, after ``error_handler`` (``(exception, key)``) if given (it may raise to stop) — only a failure of the
    sample itself (its bytes, its decoding, the encoder on its content; :func:`datareel.errors.sample_failure`
    decides): a failure of the machine or the store (an ``OSError`` with an errno such as EMFILE, EIO, ENOSPC or
    EACCES, a refused or timed-out connection, a bucket's retries run out, a shard the index lists gone missing)
    raises :class:`~datareel.errors.StorageError` whatever the policy, tells no handler and leaves the micro-batch
    unconsumed (``iter(loader)`` makes it again), and a shard truncated or changed since ``prepare`` raises
    :class:`~datareel.BatchError`; ``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers``,
    ``multiprocessing_context`` and ``timeout`` go to the ``torch.utils.data.DataLoader`` and may change freely
    between save and restore, as may ``map_threads``: threads per process making the samples (read, decode,
    ``encode_sample``) in order (docs/task-encoders.md).

    Example::

        loader = datareel.Loader(data, global_batch_size=32, micro_batch_size=4, seed=1, num_workers=2)
        batches = iter(loader)                               # next(batches) per micro-step
        torch.save(loader.state_dict(), "loader.pt")         # or json.dump: < 1 KB
        loader.load_state_dict(torch.load("loader.pt", weights_only=True))  # any world size / workers
    """

    def __init__(self, dataset: Source | Blend | Any, **options: Any):  # the options: datareel.options
        p = assemble(dataset, LoaderOptions.of(options))
        self.dataset, self.seed, self.shuffle = p.dataset, p.run.recipe.seed, p.run.recipe.shuffle
        self.rank, self.group, self.repeat, self.workers = p.rank, p.group, p.repeat, p.workers
        self.plan, self.sources, self.packing = p.plan, p.sources, p.packing
        self._driver = Driver(p.run, p.rank, p.workers, p.maker)
        self._remaker: Remaker | None = None

    run = property(lambda self: self._driver.run, doc="The current :class:`~datareel.run.Run` (a frozen value).")
    reel = _of_run("reel", "The reel: a rank's micro-steps from any cursor (:class:`~datareel.reel.Reel`).")
    layout = _of_run("layout", "``G``, ``m``, ``W`` and the schedule (:class:`~datareel.plan.layout.Layout`).")
    reel_cursor = _of_run("cursor", "The full cursor: with packing also the ``(window, offset)`` of the next pack.")
    cursor = _of_run("position", "Reel positions (packs) consumed by all ranks together: a prefix ``[0, cursor)``.")
    world_size, micro_batch_size, schedule = map(_of_run, ("world_size", "micro_batch_size", "schedule"))
    global_batch, global_batch_size, length = map(_of_run, ("global_batch", "global_batch_size", "length"))
    at_global_batch_boundary, accumulation_steps, dropped = map(
        _of_run, ("at_boundary", "accumulation_steps", "dropped")
    )
    global_batch_size_at, accumulation_steps_at = _of_run("global_batch_size_at"), _of_run("accumulation_steps_at")
    state_dict = _of_run("state_dict")

    def __iter__(self) -> LoaderIterator:
        return self._driver.iterate()  # older iterators refuse; their workers stop now (persistent ones serve on)

    def __len__(self) -> int:
        """Micro-batches this rank still yields (``repeat=False`` only)."""
        return self._driver.run.rank_steps(self.rank)

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
        return global_batches(self.__iter__, lambda: self._driver.run)

    def close(self) -> None:
        """Stop worker processes (those of live iterators too) and a planning process (also done at collection)."""
        self._driver.close()

    def load_state_dict(self, state: dict[str, Any], *, allow_batch_size_change: bool = False) -> None:
        """Continue from a saved state, on this loader's topology; iterators made before stop (and their workers).

        Raises :class:`~datareel.StateError` (:class:`~datareel.StateMismatchError` naming each differing field
        for another spec's state) and :class:`~datareel.TopologyError` (a ``ValueError``) if ``m W`` cannot split
        the rest of the current global batch.  ``allow_batch_size_change=True`` accepts a state saved with another
        global batch size or schedule, at a global-batch boundary of the saved one: the same remaining samples
        follow, cut by this loader's schedule from the saved run's global batch number on (docs/guarantees.md).
        """
        self._driver.restart(self._driver.run.restore(state, allow_batch_size_change=allow_batch_size_change))

    def next_address(self) -> Address:
        """Where the micro-batch this rank is handed next lies (:mod:`datareel.remake`)."""
        return next_address(self)

    def remake(self, address: Address) -> Any:
        """The micro-batch at ``address`` (a :meth:`next_address` of this loader's reel, on any topology), made
        again: the same units, per-sample randomness and encoding (:mod:`datareel.remake`)."""
        if self._remaker is None:
            self._remaker = Remaker(self._driver.maker)
        return self._remaker(self.reel, address)

    save_state_global, restore_state_global = dist.save_global, dist.restore_global  # collectives: see datareel.dist
    save_state_rank, restore_state_rank = state_dict, load_state_dict  # Energon's names for them


Loader.__init__.__signature__ = signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("dataset", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Source | Blend | Any"),
    ]
)
