"""The window planner protocol: one window's inputs -> its units (:class:`WindowPlan`).

A planner is what makes a stage: it sees one window of the input reel at a time (consecutive
positions, resolved to sources and indices by the plan) and returns that window's units in order.
It must be a pure function of them (every rank plans every window it reads, a restore plans a
window again, and a planning process may plan it elsewhere), and it never sees the loader.  The
window reel (:mod:`.window`) does everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import DatareelError
from .units import Units


@dataclass(frozen=True)
class WindowPlan:
    """A planned window: its ``units``; how many inputs (or outputs) it left out (counted in
    ``loader.dropped``); the seconds planning took; and ``notes``, anything the planner's
    :meth:`~WindowPlanner.report` needs in the training process (failures to hand to an error handler,
    the samples it dropped).  It crosses from a planning process: keep it small and picklable."""

    units: Units
    skipped: int = 0
    seconds: float = 0.0
    notes: Any = None


class WindowPlanner(Protocol):
    """Plans one window of the input reel into its units: a pure function of the window's inputs.

    ``__call__`` and ``spec`` are required.  Subclass this protocol to inherit the defaults of the
    others (no report, no bound, a generic refusal when an endless reel stops giving units).  A planner
    that may run in a planning process (``background=True``) must pickle under ``spawn`` / ``forkserver``.
    """

    def __call__(self, window: int, positions: np.ndarray, source_ids: np.ndarray, indices: np.ndarray) -> WindowPlan:
        """Window ``window``'s units from its inputs: ``positions`` int64[k] (consecutive input reel
        positions), ``source_ids`` int32[k], ``indices`` int64[k] (as the plan resolves them)."""
        ...

    def spec(self) -> dict[str, Any]:
        """The spec fields of this reel in a saved state (what a restore must find unchanged), e.g.
        ``{"packing": {...}}``; never a plan (saving or restoring must plan no window)."""
        ...

    def report(self, window: int, plan: WindowPlan) -> None:
        """Tell the user what planning ``window`` left out or met (in the training process, once per window)."""

    def bound(self, inputs: int) -> int | None:
        """An upper bound on the units planned from ``inputs`` input positions, known without planning
        (``None``: unknown)."""
        return None

    def stalled(self, window: int, empty: int) -> None:
        """An endless reel planned ``empty`` consecutive windows up to ``window`` without a unit: raise if
        none will ever come (the reel asks again after each further empty window)."""
        raise DatareelError(
            f"{type(self).__name__} planned no unit in {empty} consecutive windows (up to window {window}): "
            f"this endless reel would never yield a micro-batch"
        )


class WindowOptions(Protocol):
    """What a window reel reads of its stage's options (:class:`~.stage.Stage`)."""

    @property
    def window(self) -> int: ...

    @property
    def background(self) -> bool: ...

    @property
    def plan_timeout(self) -> float: ...
