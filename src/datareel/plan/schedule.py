"""Global batch size schedules: where each global batch starts when its size changes over the run.

Global batch ``b`` covers reel positions ``[S_b, S_b + G_b)`` with ``S_b = sum(G_i for i < b)``.
A schedule is resolved once into *pieces*, runs of consecutive global batches of one size::

    batches[i]   first global batch of piece i      (ints, increasing)
    positions[i] its first reel position S          (ints, increasing)
    sizes[i]     the size G of each of its batches  (the last piece never ends)

so ``S_b``, ``G_b`` and the batch holding a position are one binary search and a
multiplication each, for any ``b`` (no loop over batches).  Three rules are declared:

- an ``int`` ``G``: one piece;
- :class:`RampUp` ``(start, increment, ramp_samples, final)``, Megatron-LM's
  ``--rampup-batch-size START INCREMENT SAMPLES`` with ``--global-batch-size FINAL`` (defined in
  :mod:`datareel.plan.rampup`, importable from here);
- a piecewise list ``[(from_global_batch, G), ...]`` (the first from batch 0).

A schedule resolves into at most :data:`MAX_SCHEDULE_PIECES` (10,000) pieces: a ramp-up of more
increments, or a longer piecewise list, is refused before anything is resolved (a state naming one is
refused as damaged), so reading any schedule is bounded.

A schedule may also be *anchored* at ``(batch, position)``: it then describes only the
batches from that global batch on, the first starting at that position.  A restart that
changes the batch size on purpose anchors the new rule where the old one stopped
(:meth:`BatchSchedule.anchored`); the state records rule and anchor, so a later restore
cuts the same batches.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError, StateDamagedError, TopologyError, brief, check_int
from .rampup import MAX_SCHEDULE_PIECES, RampUp

__all__ = [
    "MAX_SCHEDULE_PIECES",
    "BatchSchedule",
    "RampUp",
    "Rule",
    "brief",
    "canonical_rule",
    "parse_spec",
    "rule_from_json",
]

Rule = int | RampUp | tuple[tuple[int, int], ...]
"""A declared schedule, canonical: an int when it is constant."""


def canonical_rule(value: Any) -> Rule:
    """``value`` (an int, a :class:`RampUp` or ``[(from_global_batch, G), ...]``) as a canonical rule;
    :class:`OptionError` naming what is wrong otherwise."""
    if isinstance(value, BatchSchedule):
        return value.rule
    if isinstance(value, RampUp):
        return value.final if value.start == value.final else value
    if isinstance(value, (list, tuple)):
        return _pieces_rule(value)
    return check_int(value, "global_batch_size", minimum=1)


def _pieces_rule(value: Any) -> Rule:
    if not value:
        raise OptionError("global_batch_size=[] is empty; give [(0, G), (from_global_batch, G), ...]")
    if len(value) > MAX_SCHEDULE_PIECES:
        raise OptionError(
            f"global_batch_size: a list of {len(value):,} pieces; datareel resolves a schedule into at most "
            f"{MAX_SCHEDULE_PIECES:,} pieces: merge pieces, or use a RampUp"
        )
    out: list[tuple[int, int]] = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            raise OptionError(
                f"global_batch_size: piece {item!r} must be a pair (from_global_batch, global_batch_size)"
            )
        first = check_int(item[0], "from_global_batch", where="global_batch_size piece")
        size = check_int(item[1], "global_batch_size", minimum=1, where="global_batch_size piece")
        if not out and first != 0:
            raise OptionError(
                f"global_batch_size: the first piece {tuple(item)} must start at global batch 0, "
                f"e.g. [(0, {size}), ...]"
            )
        if out and first <= out[-1][0]:
            raise OptionError(
                f"global_batch_size: piece {tuple(item)} starts at global batch {first}, not after the previous "
                f"piece's {out[-1][0]}; list pieces in increasing order of their first global batch"
            )
        if not out or size != out[-1][1]:  # a piece of the previous size only continues it
            out.append((first, size))
    return out[0][1] if len(out) == 1 else tuple(out)


def rule_from_json(value: Any) -> Rule:
    """A rule from its JSON form (a state's, or ``datareel verify --global-batch-size``): an int,
    ``{"ramp_up": [start, increment, samples, final]}``, ``{"pieces": [[from_batch, G], ...]}`` or the bare
    list of pieces; :class:`OptionError` (or ``TypeError`` for a wrong count of numbers) otherwise."""
    if isinstance(value, dict) and set(value) == {"ramp_up"}:
        return canonical_rule(RampUp.from_json(value))
    if isinstance(value, dict) and set(value) == {"pieces"}:
        return canonical_rule(value["pieces"])
    if isinstance(value, dict):
        raise OptionError(f"unknown schedule keys {sorted(value)}")
    return canonical_rule(value)


@dataclass(frozen=True)
class BatchSchedule:
    """A resolved schedule: the declared ``rule`` from global batch ``anchor[0]`` at position ``anchor[1]``."""

    rule: Rule
    anchor: tuple[int, int] = (0, 0)
    batches: tuple[int, ...] = field(init=False, repr=False)
    positions: tuple[int, ...] = field(init=False, repr=False)
    sizes: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        pieces = list(_resolve(self.rule, *self.anchor))
        object.__setattr__(self, "batches", tuple(p[0] for p in pieces))
        object.__setattr__(self, "positions", tuple(p[1] for p in pieces))
        object.__setattr__(self, "sizes", tuple(p[2] for p in pieces))

    @classmethod
    def of(cls, value: Any) -> BatchSchedule:
        """A schedule from what ``Loader(global_batch_size=...)`` accepts."""
        return value if isinstance(value, BatchSchedule) else cls(canonical_rule(value))

    # -- lookups: O(log pieces) ----------------------------------------------------------------------
    @property
    def constant(self) -> int | None:
        """The size when every batch has it, else ``None``."""
        return self.rule if isinstance(self.rule, int) else None

    @property
    def final(self) -> int:
        """The size the schedule settles at (its last piece's)."""
        return self.sizes[-1]

    def _piece_of_batch(self, b: int) -> int:
        if b < self.anchor[0]:
            raise TopologyError(
                f"global batch {b} lies before this schedule's anchor (global batch {self.anchor[0]}, where the "
                f"batch size was last changed): its size is not recorded"
            )
        return bisect_right(self.batches, b) - 1

    def start(self, b: int) -> int:
        """``S_b``: the first reel position of global batch ``b``."""
        i = self._piece_of_batch(b)
        return self.positions[i] + (b - self.batches[i]) * self.sizes[i]

    def size(self, b: int) -> int:
        """``G_b``: the size of global batch ``b``."""
        return self.sizes[self._piece_of_batch(b)]

    def batch_at(self, position: int) -> int:
        """The global batch holding reel position ``position``."""
        if position < self.anchor[1]:
            raise StateDamagedError(
                f"reel position {position} lies before this schedule's anchor (position {self.anchor[1]}, where "
                f"the batch size was last changed); the state is damaged"
            )
        i = bisect_right(self.positions, position) - 1
        return self.batches[i] + (position - self.positions[i]) // self.sizes[i]

    def common_divisor(self, b: int, offset: int = 0) -> int:
        """The largest ``m W`` that can continue ``offset`` positions into global batch ``b``: the greatest
        common divisor of ``offset`` and every size from ``b`` on (``m W`` must divide each of them)."""
        return math.gcd(offset, *(size for _, size in self.sizes_from(b)))

    def sizes_from(self, b: int) -> Iterator[tuple[int, int]]:
        """``(first global batch, size)`` of every piece from global batch ``b`` on."""
        i = self._piece_of_batch(b)
        yield b, self.sizes[i]
        yield from zip(self.batches[i + 1 :], self.sizes[i + 1 :])

    # -- changes and the state ----------------------------------------------------------------------
    def anchored(self, b: int, position: int) -> BatchSchedule:
        """This rule, continuing from global batch ``b`` at reel position ``position``."""
        return BatchSchedule(self.rule, (b, position))

    def spec(self) -> Any:
        """The state's ``global_batch_size``: an int for a constant, unanchored schedule (as before schedules
        existed), else ``{"ramp_up": [...]}`` / ``{"pieces": [...]}``, with ``{"from": [batch, position]}``."""
        rule: Any = self.rule
        if isinstance(rule, RampUp):
            rule = rule.to_json()
        elif isinstance(rule, tuple):
            rule = {"pieces": [list(piece) for piece in rule]}
        if self.anchor == (0, 0):
            return rule
        return {"from": list(self.anchor), "rule": rule}

    @classmethod
    def from_spec(cls, spec: Any) -> BatchSchedule:
        """Read a state's ``global_batch_size``; :class:`~datareel.errors.StateDamagedError` if it is damaged."""
        return cls(*parse_spec(spec))

    def to_json(self) -> Any:
        """The schedule's JSON form both ways, as every options class saved in a state has it: :meth:`spec`."""
        return self.spec()

    @classmethod
    def from_json(cls, value: Any) -> BatchSchedule:
        """The schedule :meth:`to_json` wrote (:meth:`from_spec`)."""
        return cls.from_spec(value)

    def describe(self) -> str:
        """The rule in words, for messages."""
        rule = self.rule
        if isinstance(rule, RampUp):
            text = (
                f"RampUp(start={rule.start}, increment={rule.increment}, ramp_samples={rule.ramp_samples}, "
                f"final={rule.final})"
            )
        elif isinstance(rule, tuple):
            text = f"pieces {[tuple(p) for p in rule]}"
        else:
            text = str(rule)
        return (
            text if self.anchor == (0, 0) else f"{text} from global batch {self.anchor[0]} (position {self.anchor[1]})"
        )


def parse_spec(spec: Any) -> tuple[Rule, tuple[int, int]]:
    """A state's ``global_batch_size`` as ``(rule, anchor)``, checked but not resolved (so bounded: a rule
    has at most :data:`MAX_SCHEDULE_PIECES` pieces); :class:`~datareel.errors.StateDamagedError` naming it if
    it is damaged."""
    try:
        anchor: tuple[int, int] = (0, 0)
        rule = spec
        if isinstance(spec, dict) and set(spec) == {"from", "rule"}:
            if not (isinstance(spec["from"], list | tuple) and len(spec["from"]) == 2):
                raise OptionError(f"'from' must be [global batch, position], got {brief(spec['from'])}")
            b, p = spec["from"]
            anchor = (check_int(b, "from batch"), check_int(p, "from position"))
            rule = spec["rule"]
        return rule_from_json(rule), anchor
    except (OptionError, TypeError, ValueError) as exc:
        raise StateDamagedError(
            f"state global_batch_size={brief(spec)} cannot be read ({str(exc)[:300]}); the state is damaged"
        ) from None


def _resolve(rule: Rule, b: int, position: int) -> Iterator[tuple[int, int, int]]:
    """-> ``(first batch, first position, size)`` per piece, from global batch ``b`` at ``position`` on."""
    if isinstance(rule, int):
        yield b, position, rule
    elif isinstance(rule, RampUp):
        while True:  # one round per size the ramp reaches: at most increments + 1
            size = rule.size_after(position)
            yield b, position, size
            if size == rule.final:
                return
            count = -(-(rule.next_change(position) - position) // size)  # batches of this size
            b, position = b + count, position + count * size
    else:
        firsts = [first for first, _ in rule]
        i = bisect_right(firsts, b) - 1
        yield b, position, rule[i][1]
        for (first, size), (_, before) in zip(rule[i + 1 :], rule[i:]):
            position += (first - b) * before
            b = first
            yield b, position, size
