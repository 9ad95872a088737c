"""The windowed stage: a reel of encoder outputs (or online packs), planned window by window.

Window ``w`` is input positions ``[w·window, (w+1)·window)``.  A planner (see
:mod:`datareel.execute.planner`) reads the window's samples, runs the
encoder's first stage under the per-position seeds and returns the window's
*items* in order: single outputs ``(position, k)`` of a generator
``encode_sample`` (0, 1 or more per input), or packs of such outputs chosen by
the user's ``select_samples_to_pack``.  The items of every window, in order,
are the stage's reel; a point in it is ``(window, offset)`` as for
length-planned packing, so a restore plans one window on any topology.

Every rank plans every window it reads (the items must be known before they are
laid out over ranks).  With ``background=True`` the planning runs in one
planning process per loader, a few windows ahead of the training thread.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import DatareelError, OptionError, PlanningMessageError, PlanningProcessDied, check_int
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .base import Descriptor
from .packed import CACHED_WINDOWS, Pack, PackedReel, window_inputs
from .planning import PlanningProcess

log = logging.getLogger("datareel")
AHEAD = 2
"""Windows planned ahead of the one being read (background planning)."""


@dataclass(frozen=True, kw_only=True)
class WindowedStage:
    """Options of the windowed stage (``Loader(stage=...)``).

    - ``window``: input positions planned together (Energon's ``packing_buffer_size``); a restore
      plans one window.
    - ``pack``: pack online: the encoder's ``select_samples_to_pack`` chooses packs among each
      window's encoded samples and workers call ``pack_selected_samples``.
    - ``background``: plan in a separate planning process (else on the thread that feeds the
      DataLoader).
    - ``plan_timeout``: seconds to wait for the planning process's plan of a window; past it the
      process is stopped and the loader plans inline (plans are pure, so only time is lost).

    A generator ``encode_sample`` (or ``preencode_sample``) always runs in this stage
    (``WindowedStage()`` is the default then).

    Example::

        loader = datareel.Loader(data, global_batch_size=64, micro_batch_size=4, task_encoder=MyPacker(),
                                 stage=datareel.WindowedStage(window=256, pack=True))
    """

    window: int = 128
    pack: bool = False
    background: bool = True
    plan_timeout: float = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", check_int(self.window, "window", minimum=1, where="WindowedStage"))
        timeout = self.plan_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise OptionError(f"WindowedStage(plan_timeout={timeout!r}) must be a number of seconds > 0")


@dataclass(frozen=True)
class WindowPlan:
    """A planned window: its items in order; how many were left out (inputs that gave no output, and
    outputs no pack took); the failures to report (exception, sample key); the seconds planning took."""

    items: list[Pack]
    skipped: int
    seconds: float
    failures: list[tuple[BaseException, str]] = field(default_factory=list)


class WindowPlanner(Protocol):
    """Plans one window: ``positions`` int64[k], ``source_ids`` int32[k], ``indices`` int64[k] -> its items."""

    def __call__(self, window: int, positions: np.ndarray, source_ids: np.ndarray, indices: np.ndarray) -> WindowPlan:
        """The window's items (each a :class:`~.packed.Pack` with ``outputs``)."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What a restore must find unchanged (the encoder's class, by name)."""
        ...

    def report(self, window: int, failures: list[tuple[BaseException, str]]) -> None:
        """Tell the user of the samples that failed while ``window`` was planned (in the training process)."""
        ...


class WindowedReel(PackedReel):
    """The stage's reel: :class:`~.packed.PackedReel`'s streaming over windows planned by ``planner``."""

    def __init__(
        self,
        plan: ReelPlan,
        sources: list[Source],
        stage: WindowedStage,
        planner: WindowPlanner,
        pass_length: int | None,
        multiprocessing_context: Any = None,
    ):
        self.plan, self.sources, self.stage, self.pass_length = plan, sources, stage, pass_length
        self.window_size, self.planner = stage.window, planner
        self._cache: OrderedDict[int, list[Pack]] = OrderedDict()
        self._dropped: dict[int, int] = {}
        self._reported: set[int] = set()
        self._packs_in_pass: int | None = None
        self._context = multiprocessing_context
        self._process: PlanningProcess | None = None
        self._planning = 0.0  # seconds spent planning (in the planner)
        self._since: float | None = None  # when this reel first waited for a plan
        self._warned = False
        self._inline = False  # set after a planning process timed out

    # -- the Reel protocol ------------------------------------------------------------------------
    def bound(self) -> int | None:
        return None  # an input may give any number of outputs: unknown until every window is planned

    def spec(self) -> dict[str, Any]:
        """The window, the packing mode and the encoder class: never a plan (saving or restoring must not
        plan windows besides the cursor's)."""
        return {"stage": {"window": self.window_size, "pack": self.stage.pack, **self.planner.fingerprint()}}

    def close(self) -> None:
        """Stop the planning process (a later window starts a new one)."""
        process, self._process = self._process, None
        if process is not None:
            process.close()

    # -- windows ----------------------------------------------------------------------------------
    def window(self, w: int) -> list[Pack]:
        if w in self._cache:
            self._cache.move_to_end(w)
            return self._cache[w]
        plan = self._plan(w)
        if w not in self._reported:  # a window planned again (evicted, restored) is reported once
            self._reported.add(w)
            self.planner.report(w, plan.failures)  # the user's handler runs here, in the training process
            if plan.skipped:
                log.debug("the windowed stage left out %d items of window %d", plan.skipped, w)
                self._dropped[w] = plan.skipped
        self._cache[w] = plan.items
        while len(self._cache) > CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return plan.items

    def _plan(self, w: int) -> WindowPlan:
        if self._since is None:
            self._since = time.perf_counter()
        if not self.stage.background or self._inline:
            plan = self.planner(w, *self._window_positions(w))
        else:
            if self._process is None:
                inputs = functools.partial(window_inputs, self.plan, self.window_size, self.pass_length)
                self._process = PlanningProcess(self.planner, inputs, self._context)
            process = self._process
            last = self.windows()
            for v in process.asked() - set(range(w, w + 1 + AHEAD)):
                process.drop(v)
            process.ask(w)
            for v in range(w + 1, w + 1 + AHEAD):
                if last is None or v < last:
                    process.ask(v)
            try:
                plan = process.result(w, self.stage.plan_timeout)
            except TimeoutError:
                # plans are pure: planning here gives the same items, so a stuck planning process costs time only
                log.warning(
                    "the planning process gave no plan for window %d within %.0f s (WindowedStage.plan_timeout); "
                    "it is stopped and this loader plans inline from now on",
                    w,
                    self.stage.plan_timeout,
                )
                self.close()
                self._inline = True
                plan = self.planner(w, *self._window_positions(w))
            except PlanningMessageError as exc:  # e.g. an exception class that does not unpickle here
                log.warning("planning window %d: %s; it is planned here instead", w, exc)
                self.close()  # a later window starts a new planning process
                plan = self.planner(w, *self._window_positions(w))
            except PlanningProcessDied as exc:
                self.close()  # a later window starts a new planning process
                raise DatareelError(
                    f"the planning process of the windowed stage died while planning window {w} ({exc}); if it "
                    f"was killed for memory, use smaller windows, or plan inline: WindowedStage(background=False)"
                ) from None
        self._planning += plan.seconds
        self._warn_if_slow()
        return plan

    def _warn_if_slow(self) -> None:
        elapsed = time.perf_counter() - (self._since or 0.0)
        if not self._warned and self._planning > max(1.0, 0.1 * elapsed):
            self._warned = True
            log.warning(
                "the windowed stage spent %.1f s planning in %.1f s (every rank runs the encoder's first stage on "
                "every sample of every window it reads, besides the workers). Cheaper: a preencode_sample that "
                "only measures (the rest in postencode_sample), or datareel.Packing with a length index",
                self._planning,
                elapsed,
            )

    def _no_progress(self, empty: int, w: int) -> None:
        raise DatareelError(
            f"the windowed stage produced no output in {empty} consecutive windows (up to reel position "
            f"{(w + 1) * self.window_size}): the encoder skips (or select_samples_to_pack leaves out) every "
            f"sample; check encode_sample / select_samples_to_pack"
        )

    def _descriptor(self, step: int, mine: list[Pack], first: int, stop: int) -> Descriptor:
        descriptor = super()._descriptor(step, mine, first, stop)
        outputs = np.concatenate([p.outputs if p.outputs is not None else np.zeros(0, np.int64) for p in mine])
        if self.stage.pack:
            return Descriptor(**{**vars(descriptor), "outputs": outputs, "truncate": None})
        return Descriptor(
            step, descriptor.positions, descriptor.source_ids, descriptor.indices,
            packed_positions=descriptor.packed_positions, outputs=outputs,
        )  # fmt: skip


def make_items(
    groups: list[list[int]], positions: np.ndarray, source_ids: np.ndarray, indices: np.ndarray, outputs: np.ndarray
) -> list[Pack]:
    """Items from groups of output numbers: output ``j`` of the window is input ``positions[j]``'s
    output ``outputs[j]`` (all int64[n], ``source_ids`` int32[n])."""
    out = []
    for group in groups:
        g = np.asarray(group, dtype=np.int64)
        out.append(Pack(positions[g], source_ids[g], indices[g], np.zeros(len(g), dtype=bool), outputs[g]))
    return out
