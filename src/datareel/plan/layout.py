"""The global-batch layout: which reel positions each rank reads at each micro-step.

With global batch size ``G``, micro-batch size ``m`` and data-parallel world
size ``W`` (``A = G / (m W)`` accumulation steps)::

    micro_batch(b, a, r) = S_b + a m W + r m + [0, m)        S_b = b G for a constant G

Equivalently, micro-step ``s`` covers the block ``[s S, (s + 1) S)`` of ``S = m W``
positions and rank ``r`` takes the ``r``-th ``m`` of it.  Hence consumed positions are
always a prefix of the reel and global batch ``b`` is ``[S_b, S_b + G_b)`` whatever
``W``, ``m`` or the number of workers.  With a schedule (:mod:`.schedule`) ``G_b``
varies and ``S_b`` is the sum of the sizes before ``b``; when a global batch does not
start at a multiple of ``S`` (after a deliberate size change), the blocks are shifted
by :func:`origin`.

For a finite reel of length ``L`` (``repeat=False``) the last micro-step may
be partial: its ``R < S`` positions are split as evenly as possible in rank
order (rank ``r`` takes ``R // W`` or ``R // W + 1`` consecutive positions,
lower ranks the larger shares), so a rank may get fewer than ``m`` samples, or
none when ``R < W``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OptionError, TopologyError, check_int
from .schedule import BatchSchedule, RampUp


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A validated ``(G, m, W)`` triple and the math on it; ``G`` may change by global batch (a schedule).

    ``global_batch_size`` is an int, a :class:`~datareel.RampUp`, a piecewise list or a
    :class:`~.schedule.BatchSchedule`; :attr:`schedule` holds it resolved.  ``m W`` must divide the size
    the schedule settles at (checked here) and every size met after a cursor (checked by
    :meth:`check_cursor`, since a restore past a ramp-up need not divide its early sizes).
    """

    global_batch_size: Any
    micro_batch_size: int
    world_size: int
    schedule: BatchSchedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "world_size"):  # stored as int (JSON states)
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1, error=TopologyError))
        given = self.global_batch_size
        try:
            schedule = BatchSchedule.of(given)
        except OptionError as exc:
            if isinstance(given, (list, tuple, RampUp)):
                raise  # a malformed schedule is a bad argument
            raise TopologyError(str(exc)) from None  # an int out of range, as before schedules existed
        object.__setattr__(self, "schedule", schedule)
        # the canonical value, immutable: an int when constant, else the resolved schedule (never the user's list)
        object.__setattr__(self, "global_batch_size", schedule if schedule.constant is None else schedule.constant)
        G, m, W = schedule.final, self.micro_batch_size, self.world_size
        if G % (m * W):
            what = "global_batch_size" if schedule.constant is not None else "the final global_batch_size"
            raise TopologyError(
                f"{what}={G} is not divisible by micro_batch_size={m} × world_size={W} (= {m * W})"
                + _suggest(G, W)
                + _world_sizes(G, m)
            )

    def with_schedule(self, schedule: BatchSchedule) -> Layout:
        """This topology with another (say, anchored) schedule."""
        return Layout(global_batch_size=schedule, micro_batch_size=self.micro_batch_size, world_size=self.world_size)

    @property
    def step_size(self) -> int:
        """``S = m W``: positions consumed by all ranks together in one micro-step."""
        return self.micro_batch_size * self.world_size

    @property
    def accumulation_steps(self) -> int:
        """``A = G / (m W)`` of a constant global batch size (a schedule's vary: :meth:`accumulation_steps_at`)."""
        if self.schedule.constant is None:
            raise TopologyError(
                f"the global batch size follows the schedule {self.schedule.describe()}: ask "
                f"accumulation_steps_at(b) for global batch b"
            )
        return self.schedule.constant // self.step_size

    def accumulation_steps_at(self, b: int) -> int:
        """``A_b = G_b / (m W)``: micro-steps in global batch ``b`` (:class:`TopologyError` when ``m W`` does
        not divide ``G_b``)."""
        G, S = self.schedule.size(b), self.step_size
        if G % S:
            self.check_sizes(b)  # raises, naming the batch and the fix
        return G // S

    def check_cursor(self, cursor: int) -> None:
        """Refuse a cursor this layout cannot continue from in whole micro-steps: one inside a global batch
        whose rest ``m W`` cannot split, or one before a global batch whose size ``m W`` does not divide."""
        schedule, S = self.schedule, self.step_size
        b = schedule.batch_at(cursor)
        G, offset = schedule.size(b), cursor - schedule.start(b)
        if offset % S:
            common = schedule.common_divisor(b, offset)
            fits = [d for d in range(1, min(common, SUGGEST_UP_TO) + 1) if common % d == 0]
            raise TopologyError(
                f"cannot resume at reel position {cursor}: it is {offset} positions into global "
                f"batch {b} (global_batch_size={G}), and micro_batch_size="
                f"{self.micro_batch_size} × world_size={self.world_size} = {S} does not "
                f"divide {offset}, so the rest of that global batch cannot be split into whole "
                f"micro-steps; resume with micro_batch_size × world_size in {fits}"
                + _world_sizes(common, self.micro_batch_size, " here")
                + "; or save checkpoints at global-batch boundaries"
            )
        self.check_sizes(b)

    def check_sizes(self, b: int, until: int | None = None) -> None:
        """Refuse a schedule with a global batch from ``b`` on (starting before position ``until``, if given)
        that ``m W`` does not divide, naming the first."""
        S = self.step_size
        for first, G in self.schedule.sizes_from(b):
            if until is not None and self.schedule.start(first) >= until:
                return  # the run ends before this batch
            if G % S:
                common = self.schedule.common_divisor(b)
                raise TopologyError(
                    f"global batch {first} of the schedule {self.schedule.describe()} has global_batch_size={G}, "
                    f"which micro_batch_size={self.micro_batch_size} × world_size={self.world_size} = {S} does "
                    f"not divide; every global batch from {b} on must be a whole number of micro-steps. Choose "
                    f"micro_batch_size × world_size dividing {common} (the sizes' greatest common divisor)"
                    + _suggest(common, self.world_size)
                    + _world_sizes(common, self.micro_batch_size, " here")
                    + "; or a schedule whose sizes are multiples of it"
                )

    def rank_span(self, step: int, rank: int, length: int | None = None, origin: int = 0) -> tuple[int, int]:
        """Positions ``[start, stop)`` that ``rank`` reads at micro-step ``step`` (the block
        ``[origin + step S, origin + (step + 1) S)``; see :func:`origin`).

        ``length`` is the reel's length when it is finite; the span is then cut
        to it (see the module doc for how a partial last micro-step is split).
        """
        S, m, W = self.step_size, self.micro_batch_size, self.world_size
        base = origin + step * S
        if length is None or base + S <= length:
            start = base + rank * m
            return start, start + m
        rest = max(0, length - base)
        share, extra = divmod(rest, W)
        start = base + rank * share + min(rank, extra)
        return start, start + share + (1 if rank < extra else 0)

    def rank_steps(self, rank: int, length: int, start: int = 0) -> int:
        """Micro-steps in which ``rank`` reads at least one position of a finite reel of ``length``,
        from position ``start`` (a step boundary or the end) on.  O(1): every step but a partial last
        one gives each rank ``m`` positions; the partial one (``R`` positions) reaches ranks ``< R``."""
        S = self.step_size
        if start >= length:
            return 0
        o = origin(start, S)
        full = (length - o) // S - (start - o) // S  # whole steps left
        rest = (length - o) % S
        partial = 1 if rest and rank < rest else 0
        return full + partial

    def rank_positions(self, step: int, rank: int, length: int | None = None) -> np.ndarray:
        """-> int64[<= m]: the reel positions of one rank's micro-batch."""
        start, stop = self.rank_span(step, rank, length)
        return np.arange(start, stop, dtype=np.int64)


def origin(cursor: int, step_size: int) -> int:
    """Where the micro-step grid of a stream starting at ``cursor`` begins: ``cursor mod S``.

    With a constant ``G`` every global batch starts at a multiple of ``S`` and this is 0.  After a
    restart that changed the batch size (or skipped a ramp-up's early sizes that ``S`` does not divide)
    a global batch may start elsewhere; ``check_cursor`` has made sure the batches from ``cursor`` on
    are whole micro-steps, so the grid through ``cursor`` meets every later global-batch boundary.
    """
    return cursor % step_size


def _suggest(G: int, W: int) -> str:
    if G % W:
        return f" (world_size={W} itself does not divide {G}: change global_batch_size or world_size)"
    per_rank = G // W
    ok = [m for m in range(1, min(per_rank, SUGGEST_UP_TO) + 1) if per_rank % m == 0]  # bounded: G may be huge
    more = ", ..." if per_rank > SUGGEST_UP_TO else ""
    return f"; micro_batch_size values that work with world_size={W}: {', '.join(map(str, ok))}{more}"


def _world_sizes(n: int, m: int, here: str = "") -> str:
    """The world sizes ``W`` with ``m W`` dividing ``n`` (those up to :data:`SUGGEST_UP_TO`), as a clause."""
    if n % m:
        return f"; no world_size works with micro_batch_size={m}{here} ({m} does not divide {n})"
    per_step = n // m
    ok = [w for w in range(1, min(per_step, SUGGEST_UP_TO) + 1) if per_step % w == 0]  # bounded: n may be huge
    more = ", ..." if per_step > SUGGEST_UP_TO else ""
    return f"; world_size values that work with micro_batch_size={m}{here}: {', '.join(map(str, ok))}{more}"


SUGGEST_UP_TO = 4096
"""Micro-batch sizes tried when an error suggests some (the search must stay instant for any G)."""
