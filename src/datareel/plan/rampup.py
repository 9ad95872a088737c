"""Megatron-LM's batch-size ramp-up as a declared rule, and the bound on the pieces any schedule resolves into.

:class:`RampUp` is one of the rules :mod:`datareel.plan.schedule` resolves (beside an ``int`` and a
piecewise list).  It owns its JSON form both ways (:meth:`RampUp.to_json`, :meth:`RampUp.from_json`): a
state's ``spec.global_batch_size`` names it as ``{"ramp_up": [start, increment, ramp_samples, final]}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, check_int

MAX_SCHEDULE_PIECES = 10_000
"""The most pieces (runs of one global batch size) a schedule may resolve into: a :class:`RampUp` has one
per size it reaches (``increments + 1``), a piecewise list one per entry."""


@dataclass(frozen=True)
class RampUp:
    """Megatron-LM's batch-size ramp-up: start at ``start``, grow by ``increment`` over ``ramp_samples``
    samples, then stay at ``final``.

    The rule (Megatron-LM, ``megatron/core/num_microbatches_calculator.py``,
    ``RampupBatchsizeNumMicroBatchesCalculator.update``): with ``n = (final - start) / increment``
    increments and ``r = ramp_samples / n`` samples per increment (a float), the global batch that
    begins after ``c`` consumed samples has ``final`` samples if ``c > ramp_samples``, else
    ``start + increment * int(c / r)``.  Megatron evaluates it before every iteration, so batch
    ``b + 1`` begins where batch ``b`` ends.  With packing, "samples" are packs.

    Example (``--rampup-batch-size 32 32 1000000 --global-batch-size 256``)::

        Loader(data, global_batch_size=datareel.RampUp(32, 32, 1_000_000, 256), micro_batch_size=4)
    """

    start: int
    increment: int
    ramp_samples: int
    final: int

    def __post_init__(self) -> None:
        for name in ("start", "increment", "ramp_samples", "final"):
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1, where="RampUp"))
        start, increment, final = self.start, self.increment, self.final
        if final < start:
            raise OptionError(
                f"RampUp(start={start}, final={final}): the final global batch size must be at least the start; "
                f"for a constant size pass global_batch_size={final}"
            )
        if (final - start) % increment:
            raise OptionError(
                f"RampUp(start={start}, increment={increment}, final={final}): final - start = {final - start} is "
                f"not a multiple of increment={increment} (Megatron requires it); choose an increment that "
                f"divides {final - start}"
            )
        if self.increments + 1 > MAX_SCHEDULE_PIECES:
            raise OptionError(
                f"RampUp(start={start}, increment={increment}, final={final}) has {self.increments + 1:,} global "
                f"batch sizes; datareel resolves a schedule into at most {MAX_SCHEDULE_PIECES:,} (each size is a "
                f"piece of the schedule): choose an increment of at least "
                f"{-(-(final - start) // (MAX_SCHEDULE_PIECES - 1)):,}"
            )

    def to_json(self) -> dict[str, list[int]]:
        """The rule's JSON form in a state: ``{"ramp_up": [start, increment, ramp_samples, final]}``."""
        return {"ramp_up": [self.start, self.increment, self.ramp_samples, self.final]}

    @classmethod
    def from_json(cls, value: Any) -> RampUp:
        """The rule :meth:`to_json` wrote; :class:`OptionError` for another dict (``TypeError`` for a wrong count
        of numbers, as ``RampUp(*numbers)`` gives)."""
        if not (isinstance(value, dict) and set(value) == {"ramp_up"}):
            raise OptionError(f'a RampUp is written {{"ramp_up": [start, increment, samples, final]}}, got {value!r}')
        return cls(*value["ramp_up"])

    @property
    def increments(self) -> int:
        return (self.final - self.start) // self.increment

    def size_after(self, consumed: int) -> int:
        """Megatron's size for the global batch that begins after ``consumed`` samples."""
        if consumed > self.ramp_samples or self.increments == 0:
            return self.final
        per_increment = self.ramp_samples / self.increments  # a float, as in Megatron
        return self.start + int(consumed / per_increment) * self.increment

    def next_change(self, consumed: int) -> int:
        """The first ``c > consumed`` where :meth:`size_after` grows (``size_after(consumed) < final``).

        ``int(c / r)`` is monotone in ``c``, so the change point is found by galloping from the float
        estimate and bisecting: O(log) evaluations however far the estimate is (near ``2^62`` samples a
        float is off by hundreds)."""
        level = (self.size_after(consumed) - self.start) // self.increment
        per_increment = self.ramp_samples / self.increments
        end = self.ramp_samples + 1  # no change within the ramp: the final size from there on

        def grown(c: int) -> bool:
            return c >= end or int(c / per_increment) > level

        guess = min(max(consumed + 1, math.ceil((level + 1) * per_increment)), end)
        step = 1
        if grown(guess):  # the change is at guess or before it, after consumed
            while guess - step > consumed and grown(guess - step):
                step *= 2
            low, high = max(consumed, guess - step), guess
        else:  # after guess
            while not grown(guess + step):
                step *= 2
            low, high = guess, min(guess + step, end)
        while high - low > 1:  # grown(high), not grown(low) (or low == consumed)
            middle = (low + high) // 2
            low, high = (low, middle) if grown(middle) else (middle, high)
        return high
