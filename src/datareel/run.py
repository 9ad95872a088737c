"""A run: the reel, the layout that cuts it into global batches and micro-steps, and the cursor, as one value.

A :class:`Run` is frozen.  It answers every question about progress (which global batch comes next, whether
the micro-batches handed out so far end one, how many accumulation steps the current one has), feeds a
rank's descriptors from its cursor (:meth:`Run.stream`), writes the state (:meth:`Run.state_dict`) and
reads one back (:meth:`Run.restore`, which returns another run).  Handing a batch out is a new run at the
cursor after it (:meth:`Run.at`): nothing in a run changes after it is made.

The :class:`~datareel.Loader` holds the current run and delegates to it; its iterator, the only code
that moves the cursor, replaces the run (:mod:`datareel.iteration`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import OptionError, check_int
from .plan.blocks import BlockShuffle
from .plan.layout import Layout
from .plan.schedule import BatchSchedule
from .reel import Cursor, Reel, Step
from .resume import restore_layout
from .state import make_state


@dataclass(frozen=True)
class Recipe:
    """What a run's reel is made of, as a restore must find it again: the dataset (a :class:`~datareel.Source`
    or blend, whose ``fingerprint()`` the state records), the seed, whether the reel is shuffled and, for the
    block (locality) shuffle, its resolved options."""

    dataset: Any
    seed: int
    shuffle: bool
    blocks: BlockShuffle | None = None


@dataclass(frozen=True)
class Run:
    """The reel, the layout (``G``, ``m``, ``W`` and the schedule), the cursor and the recipe of one run."""

    reel: Reel
    layout: Layout
    cursor: Cursor
    recipe: Recipe

    @classmethod
    def start(cls, reel: Reel, layout: Layout, recipe: Recipe) -> Run:
        """A run at the reel's start (a fresh loader)."""
        return cls(reel, layout, reel.start(), recipe)

    def at(self, cursor: Cursor) -> Run:
        """This run with ``cursor``: after a batch is handed out, or at the end of a finite pass."""
        return Run(self.reel, self.layout, cursor, self.recipe)

    # -- topology and progress ---------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        """``W``: the data-parallel ranks."""
        return self.layout.world_size

    @property
    def micro_batch_size(self) -> int:
        """``m``: samples (packs) per micro-batch."""
        return self.layout.micro_batch_size

    @property
    def schedule(self) -> BatchSchedule:
        """The global batch sizes, resolved (``start(b)``, ``size(b)``, ``batch_at(position)``)."""
        return self.layout.schedule

    @property
    def position(self) -> int:
        """Reel positions (packs) consumed by all ranks together: a prefix ``[0, position)``."""
        return self.cursor.position

    @property
    def seed(self) -> int:
        """The run's seed (its workers' too)."""
        return self.recipe.seed

    def resume_note(self) -> str:
        """How a training loop continues after an iterator over this run ended early (a note on its error)."""
        return (
            f"call iter(loader) again to continue from cursor {self.position} (nothing handed out is lost or "
            f"repeated) with fresh workers"
        )

    @property
    def at_end(self) -> bool:
        """Whether the cursor is the end of a ``repeat=False`` pass."""
        return self.reel.at_end(self.cursor)

    @property
    def global_batch(self) -> int:
        """The global batch the next micro-batch belongs to (when :attr:`at_boundary`, the number of global
        batches completed, i.e. optimizer steps taken; after a pass that ended inside a global batch, the
        one after it)."""
        schedule, position = self.layout.schedule, self.cursor.position
        b = schedule.batch_at(position)
        if schedule.start(b) != position and self.at_end:
            b += 1  # the pass ended inside global batch b: that (partial) batch is done
        return b

    @property
    def at_boundary(self) -> bool:
        """Whether the micro-batches handed out so far end a global batch: right after a ``next()``, the
        micro-batch just received is the last of its global batch (step the optimizer after it).  Also true
        once a ``repeat=False`` pass has been consumed to its end.  The last, partial micro-step of such a
        pass may give a rank nothing (docs/guarantees.md): that rank's previous micro-batch is then not
        flagged, and its iterator ends (``StopIteration``) where the others read one more, as with any
        uneven end of data (DDP's ``join()`` handles it)."""
        if self.at_end:
            return True
        schedule, position = self.layout.schedule, self.cursor.position
        return schedule.start(schedule.batch_at(position)) == position

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
        """``G_b``: the size of global batch ``b`` under the run's schedule."""
        return self.layout.schedule.size(check_int(b, "b"))

    def accumulation_steps_at(self, b: int) -> int:
        """``G_b / (m W)``: micro-batches per rank in global batch ``b``."""
        return self.layout.accumulation_steps_at(check_int(b, "b"))

    @property
    def length(self) -> int | None:
        """Positions (packs, with packing) in one pass of a ``repeat=False`` run; ``None`` if endless."""
        return self.reel.length(self.cursor)

    @property
    def dropped(self) -> int:
        """Samples the packing's over-length policy dropped so far (each planned window counted once)."""
        return self.reel.dropped

    def rank_steps(self, rank: int) -> int:
        """Micro-batches ``rank`` still reads (``repeat=False`` only: a ``TypeError`` when endless)."""
        length = self.length
        if length is None:
            raise TypeError("a Loader with repeat=True is infinite and has no len()")
        return self.layout.rank_steps(rank, length, self.cursor.position)

    # -- the feed ----------------------------------------------------------------------------------------
    def check_sizes(self) -> None:
        """Before any data moves: refuse a layout that cannot cut every global batch ahead into whole
        micro-steps (a schedule's later sizes), naming the first (a pass consumed to its end has none)."""
        if not self.at_end:
            self.layout.check_sizes(self.global_batch, until=self.reel.bound())

    def stream(self, rank: int) -> Iterator[Step]:
        """``rank``'s micro-steps from the cursor: ``(descriptor, cursor after the step)``; a finite pass stops
        at its end (:meth:`datareel.reel.Reel.stream`)."""
        return self.reel.stream(self.cursor, self.layout, rank)

    # -- state -------------------------------------------------------------------------------------------
    def spec(self, layout: Layout | None = None) -> dict[str, Any]:
        """The spec the state records (and a restore must find unchanged): seed, shuffle, the global batch
        size (``layout``'s schedule, this run's by default), the dataset's fingerprint and the reel's own
        fields."""
        recipe = self.recipe
        spec = {
            "seed": recipe.seed,
            "shuffle": recipe.shuffle,
            "global_batch_size": (layout or self.layout).schedule.spec(),
            "dataset": recipe.dataset.fingerprint(),
        }
        if recipe.blocks is not None:  # absent for the full shuffle: states from before it keep their bytes
            spec["locality"] = recipe.blocks.to_json()
        own = self.reel.spec()
        clash = sorted(set(own) & set(spec))
        if clash:  # a stage's spec() must not overwrite what keys the reel itself
            raise OptionError(
                f"the reel's stage records {clash} in the saved spec, which are the loader's own fields; a stage's "
                f"spec() must put its fields under 'stage' (docs/stages.md)"
            )
        return {**spec, **own}

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint: JSON-serialisable, identical on every rank, < 1 KB."""
        return make_state(self.cursor, self.spec())

    def restore(self, state: Any, *, layout: Layout | None = None, allow_batch_size_change: bool = False) -> Run:
        """The run that continues ``state`` on ``layout``'s topology (this run's by default): the state's
        cursor, and the schedule anchored as :mod:`datareel.resume` says.  Raises
        :class:`~datareel.StateError` for a state that is not this run's (or is damaged) and
        :class:`~datareel.TopologyError` when ``m W`` cannot split the rest of the current global batch."""
        onto = self if layout is None else Run(self.reel, layout, self.cursor, self.recipe)
        restored, cursor = restore_layout(onto, state, allow_batch_size_change)
        self.reel.check(cursor, restored)
        return Run(self.reel, restored, cursor, self.recipe)
