"""The global-batch layout: which reel positions each rank reads at each micro-step.

With global batch size ``G``, micro-batch size ``m`` and data-parallel world
size ``W`` (``A = G / (m W)`` accumulation steps)::

    micro_batch(b, a, r) = b G + a m W + r m + [0, m)

Equivalently, micro-step ``s = b A + a`` covers the block ``[s S, (s + 1) S)``
of ``S = m W`` positions and rank ``r`` takes the ``r``-th ``m`` of it.  Hence
consumed positions are always a prefix of the reel and global batch ``b`` is
``[b G, (b + 1) G)`` whatever ``W``, ``m`` or the number of workers.

For a finite reel of length ``L`` (``repeat=False``) the last micro-step may
be partial: its ``R < S`` positions are split as evenly as possible in rank
order (rank ``r`` takes ``R // W`` or ``R // W + 1`` consecutive positions,
lower ranks the larger shares), so a rank may get fewer than ``m`` samples, or
none when ``R < W``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TopologyError, check_int


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A validated ``(G, m, W)`` triple and the math on it."""

    global_batch_size: int
    micro_batch_size: int
    world_size: int

    def __post_init__(self) -> None:
        for name in ("global_batch_size", "micro_batch_size", "world_size"):  # stored as int (JSON states)
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1, error=TopologyError))
        G, m, W = self.global_batch_size, self.micro_batch_size, self.world_size
        if G % (m * W):
            raise TopologyError(
                f"global_batch_size={G} is not divisible by micro_batch_size={m} × "
                f"world_size={W} (= {m * W})" + _suggest(G, W)
            )

    @property
    def step_size(self) -> int:
        """``S = m W``: positions consumed by all ranks together in one micro-step."""
        return self.micro_batch_size * self.world_size

    @property
    def accumulation_steps(self) -> int:
        """``A = G / (m W)``."""
        return self.global_batch_size // self.step_size

    def check_cursor(self, cursor: int) -> None:
        """Refuse a cursor this layout cannot continue from in whole micro-steps."""
        G, S = self.global_batch_size, self.step_size
        offset = cursor % G
        if offset % S:
            fits = [d for d in range(1, G + 1) if G % d == 0 and offset % d == 0]
            raise TopologyError(
                f"cannot resume at reel position {cursor}: it is {offset} positions into global "
                f"batch {cursor // G} (global_batch_size={G}), and micro_batch_size="
                f"{self.micro_batch_size} × world_size={self.world_size} = {S} does not "
                f"divide {offset}, so the rest of that global batch cannot be split into whole "
                f"micro-steps; resume with micro_batch_size × world_size in {fits}, or save "
                f"checkpoints at global-batch boundaries"
            )

    def rank_span(self, step: int, rank: int, length: int | None = None) -> tuple[int, int]:
        """Positions ``[start, stop)`` that ``rank`` reads at micro-step ``step``.

        ``length`` is the reel's length when it is finite; the span is then cut
        to it (see the module doc for how a partial last micro-step is split).
        """
        S, m, W = self.step_size, self.micro_batch_size, self.world_size
        base = step * S
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
        full = max(0, length // S - -(-start // S))  # whole steps left
        rest = length % S
        partial = 1 if rest and start < length and rank < rest else 0
        return full + partial

    def rank_positions(self, step: int, rank: int, length: int | None = None) -> np.ndarray:
        """-> int64[<= m]: the reel positions of one rank's micro-batch."""
        start, stop = self.rank_span(step, rank, length)
        return np.arange(start, stop, dtype=np.int64)


def _suggest(G: int, W: int) -> str:
    if G % W:
        return f" (world_size={W} itself does not divide {G}: change global_batch_size or world_size)"
    per_rank = G // W
    ok = [m for m in range(1, min(per_rank, SUGGEST_UP_TO) + 1) if per_rank % m == 0]  # bounded: G may be huge
    more = ", ..." if per_rank > SUGGEST_UP_TO else ""
    return f"; micro_batch_size values that work with world_size={W}: {', '.join(map(str, ok))}{more}"


SUGGEST_UP_TO = 4096
"""Micro-batch sizes tried when an error suggests some (the search must stay instant for any G)."""
