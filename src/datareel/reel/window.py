"""The window reel: a reel planned window by window by any :class:`WindowPlanner`.

Window ``w`` is input positions ``[w·window, (w+1)·window)`` of the plan.  A planner turns the window's
inputs (positions, sources, indices) into its *units*, in order (see :mod:`.units`): packs planned from
lengths (:mod:`.packed`), a generator encoder's outputs or online packs (the windowed stage,
:mod:`datareel.execute.planner`), or a user's planner.  The reel is the concatenation of every window's
units; a point in it is ``(window, offset)``, which the cursor keeps beside the reel position, so a
restore plans one window, never the windows before it.  Every rank walks the same unit stream and keeps
its own ``m`` units of each micro-step (the layout of :mod:`datareel.plan.layout`, applied to units).

:class:`WindowReel` owns everything but the planning: the window cache, the counts of what planners left
out, streaming, checking restored cursors, the spec, and where planning runs (inline or in a planning
process a few windows ahead, :mod:`.background`).  A new stage is a planner (plus its options,
:class:`~.stage.Stage`); nothing here changes.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import DatareelError, OptionError, StateDamagedError, StateMismatchError
from ..plan.layout import Layout, origin
from ..plan.nodes import ReelPlan
from .background import Planning
from .base import Descriptor, Step
from .cursor import Cursor
from .planner import WindowOptions, WindowPlan, WindowPlanner
from .units import Units

__all__ = ["CACHED_WINDOWS", "WindowOptions", "WindowPlan", "WindowPlanner", "WindowReel", "patience", "window_inputs"]

CACHED_WINDOWS = 8
"""Planned windows a reel keeps (a micro-step may span several; a restore plans one)."""


def window_inputs(
    plan: ReelPlan, size: int, pass_length: int | None, w: int, *, whole: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window ``w``'s input positions, leaves and indices for windows of ``size`` positions: int64[k], int32[k],
    int64[k] (cut at the end of a finite pass of ``pass_length`` unless ``whole``)."""
    stop = (w + 1) * size if pass_length is None or whole else min((w + 1) * size, pass_length)
    positions = np.arange(w * size, stop, dtype=np.int64)
    leaf, index = plan.resolve(positions)
    return positions, leaf, index


def patience(plan: ReelPlan, sizes: list[int], window: int) -> int:
    """Input positions without a unit after which an endless reel asks its planner whether any will come:
    four passes of the reel (of every source, for a weighted mix: ``sizes``), at most 65,536, at least a window."""
    passes = plan.epoch_length or sum(sizes)
    return max(window, min(65_536, 4 * passes))


class WindowReel:
    """Plans windows on demand (a few cached) with ``planner`` and streams micro-steps of units from any cursor.

    ``stage``: the options (``window``, ``background``, ``plan_timeout``); ``pass_length``: input positions
    of one ``repeat=False`` pass (``None``: endless); ``patience``: see :func:`patience`.
    """

    def __init__(
        self,
        plan: ReelPlan,
        stage: WindowOptions,
        pass_length: int | None,
        planner: WindowPlanner,
        *,
        multiprocessing_context: Any = None,
        patience: int | None = None,
    ):
        self.plan, self.pass_length, self.planner = plan, pass_length, planner
        self.window_size = stage.window
        self.patience = patience if patience is not None else max(self.window_size, 65_536)
        inputs = functools.partial(window_inputs, plan, self.window_size, pass_length)
        self.planning = Planning(planner, inputs, self.windows(), stage, multiprocessing_context)
        self._cache: OrderedDict[int, Units] = OrderedDict()
        self._dropped: dict[int, int] = {}  # window -> what it left out (windows that left out some), counted once
        self._reported: set[int] = set()
        self._units_after: np.ndarray | None = None  # int64[windows + 1]: units in windows [w, last), per w

    # -- the Reel protocol ------------------------------------------------------------------------
    def start(self) -> Cursor:
        return Cursor(0, (0, 0))

    @property
    def dropped(self) -> int:
        return sum(self._dropped.values())

    def length(self, cursor: Cursor | None = None) -> int | None:
        """Units in one finite pass (plans every window once; only ``len()`` and restore keys need it).  From
        ``cursor``: its position plus the units left after it, the pass's length as this loader serves it, also
        where the windows before the cursor's were planned by another encoder class (a state restored at a
        window's start)."""
        last = self.windows()
        if last is None:
            return None
        if self._units_after is None:
            units = np.array([len(self.window(w)) for w in range(last)] + [0], dtype=np.int64)  # (last + 1,)
            self._units_after = np.cumsum(units[::-1])[::-1]
        if cursor is None or cursor.pack is None:
            return int(self._units_after[0])
        w, o = cursor.pack
        return cursor.position if w >= last else cursor.position - o + int(self._units_after[w])

    def spec(self) -> dict[str, Any]:
        return self.planner.spec()

    def bound(self) -> int | None:
        return None if self.pass_length is None else self.planner.bound(self.pass_length)

    def at_end(self, cursor: Cursor) -> bool:
        last = self.windows()
        return last is not None and cursor.pack is not None and cursor.pack[0] >= last

    def check(self, cursor: Cursor, layout: Layout) -> None:
        if cursor.pack is None:
            raise StateDamagedError(
                "the state has no pack=[window, offset] although this loader packs; the state is damaged"
            )
        w, o = cursor.pack
        last = self.windows()
        if last is not None and w >= last:
            if (w, o) != (last, 0):
                raise StateMismatchError(
                    f"state pack={[w, o]} lies beyond this repeat=False pass ({last} windows of "
                    f"{self.window_size}); it was saved by a loader with repeat=True: restore it into one",
                    {"repeat": (True, False)},
                )
            return  # the end of a pass resumes on any layout
        layout.check_cursor(cursor.position)
        units = len(self.window(w))
        if o and o >= units:
            raise StateDamagedError(
                f"state pack={[w, o]}: window {w} holds {units} packs, so offset {o} does not exist; "
                f"the state is damaged, or the lengths behind the packing changed since it was saved"
            )

    def stream(self, start: Cursor, layout: Layout, rank: int) -> Iterator[Step]:
        if start.pack is None:
            raise DatareelError("internal: a window reel's stream needs a cursor with pack=(window, offset)")
        last = self.windows()
        if last is not None and start.pack[0] >= last:
            return  # already at the end of the pass
        S, end = layout.step_size, (last or 0, 0)
        windows = self._from(*start.pack)
        head = next(windows, None)  # (w, units of w, first unit left): the next unit's window
        if head is None:  # only empty windows were left: this is the end of the pass
            yield Step(None, Cursor(start.position, end))
            return
        o = origin(start.position, S)  # steps are the blocks [o + s S, o + (s + 1) S) of units
        for step in itertools.count((start.position - o) // S):
            group: list[tuple[Units, int, int]] = []  # this micro-step's units, all ranks: (window's, lo, hi)
            need, after = S, end
            while need and head is not None:
                w, units, lo = head
                hi = min(len(units), lo + need)
                group.append((units, lo, hi))
                need -= hi - lo
                after = (w, hi) if hi < len(units) else (w + 1, 0)  # just after the last unit taken
                head = (w, units, hi) if hi < len(units) else next(windows, None)  # one unit of look-ahead
            base, taken = o + step * S, S - need
            ends = head is None  # a finite pass ends with this step (also when trailing windows hold no unit)
            a, b = layout.rank_span(step, rank, base + taken if ends else None, o)
            mine = _span(group, a - base, b - base)
            yield Step(_descriptor(step, mine, a) if mine else None, Cursor(base + taken, end if ends else after))
            if ends:
                return

    def point(self, cursor: Cursor, skip: int) -> tuple[int, int]:
        if cursor.pack is None:
            raise DatareelError("internal: a window reel's point needs a cursor with pack=(window, offset)")
        for w, units, lo in self._from(*cursor.pack):
            if lo + skip < len(units):
                return w, lo + skip
            skip -= len(units) - lo
        raise OptionError(f"no unit lies {skip} units after the end of this repeat=False pass")

    def descriptor(self, step: int, start: int, stop: int, point: tuple[int, int] | None) -> Descriptor:
        if point is None:
            raise OptionError(
                f"address {(start, stop)} names no window, but this loader's reel is planned by windows (packing, or "
                f"a generator encode_sample): its addresses are (start, stop, window, offset)"
            )
        mine, need = [], stop - start
        for _, units, lo in self._from(*point):
            hi = min(len(units), lo + need)
            mine.append(units.take(lo, hi))
            need -= hi - lo
            if not need:
                break
        if need:
            raise OptionError(f"units [{start}, {stop}) from window point {point} run past the end of the pass")
        return _descriptor(step, mine, start)

    def close(self) -> None:
        """Stop the planning process, if any (a later window starts a new one)."""
        self.planning.close()

    # -- windows ----------------------------------------------------------------------------------
    def windows(self) -> int | None:
        """Windows of a finite input reel (``None``: endless)."""
        if self.pass_length is None:
            return None
        return -(-self.pass_length // self.window_size)

    def window(self, w: int) -> Units:
        """The units of window ``w``, in order (possibly none: the planner left every input out)."""
        if w in self._cache:
            self._cache.move_to_end(w)
            return self._cache[w]
        plan = self.planning.plan(w)
        if w not in self._reported:  # a window planned again (evicted, restored) is reported once
            self._reported.add(w)
            self.planner.report(w, plan)  # the user's handler may run here, in the training process
            if plan.skipped:
                self._dropped[w] = plan.skipped
        self._cache[w] = plan.units
        while len(self._cache) > CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return plan.units

    def _from(self, w: int, o: int) -> Iterator[tuple[int, Units, int]]:
        """From ``(w, o)`` on, each window with units left: ``(w, its units, the first unit left)``."""
        last = self.windows()
        empty = 0  # consecutive windows without a unit
        while last is None or w < last:
            units = self.window(w)
            empty = 0 if len(units) else empty + 1
            if last is None and empty * self.window_size > self.patience:
                self.planner.stalled(w, empty)
            if o < len(units):
                yield w, units, o
            w, o = w + 1, 0


def _span(group: list[tuple[Units, int, int]], lo: int, hi: int) -> list[Units]:
    """Units ``[lo, hi)`` of a micro-step's ``group`` (numbered from the step's first unit), as slices."""
    out, first = [], 0
    for units, a, b in group:
        cut_lo, cut_hi = max(a, a + lo - first), min(b, a + hi - first)
        if cut_lo < cut_hi:
            out.append(units.take(cut_lo, cut_hi))
        first += b - a
    return out


def _descriptor(step: int, mine: list[Units], first: int) -> Descriptor:
    """One rank's units of a micro-step as a descriptor; they hold reel positions ``[first, first + u)``."""
    units = Units.concat(mine)
    return Descriptor(
        step,
        units.positions,
        units.source_ids,
        units.indices,
        units=np.arange(first, first + len(units), dtype=np.int64),
        sizes=units.sizes,
        packs=units.packs,
        outputs=units.outputs,
        truncate=units.truncate,
        planned=units.planned,
    )
