"""Where a window reel's planner runs: inline, or in a planning process a few windows ahead.

With ``background=True`` the first window asked starts one planning process (:mod:`.planning`) that
plans the window asked and the :data:`AHEAD` after it while the training thread works.  Plans are
pure, so every failure of the process costs time only, never a window: past ``plan_timeout`` the
process is stopped and this reel plans inline from then on; a plan that does not unpickle here is
planned again inline; a process that died is named (it was likely killed for memory).  Any planner
runs here alike (:class:`~.window.WindowPlanner`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import DatareelError, PlanningMessageError, PlanningProcessDied
from .planner import WindowOptions, WindowPlan, WindowPlanner
from .planning import Inputs, PlanningProcess

log = logging.getLogger("datareel")
AHEAD = 2
"""Windows planned ahead of the one being read (background planning)."""


class Planning:
    """Plans windows with ``planner`` over ``inputs(w)``, inline or (``stage.background``) in a planning process.

    ``windows``: the windows of a finite pass (``None``: endless), so nothing past its end is asked.
    """

    def __init__(
        self,
        planner: WindowPlanner,
        inputs: Callable[[int], Inputs],
        windows: int | None,
        stage: WindowOptions,
        context: Any = None,
    ):
        self.planner, self.inputs, self.windows = planner, inputs, windows
        self.background, self.timeout, self.context = stage.background, stage.plan_timeout, context
        self.options = type(stage).__name__  # named in the advice of messages
        self.inline = not self.background  # set for good after a planning process timed out
        self._process: PlanningProcess | None = None
        self._spent = 0.0  # seconds spent planning (in the planner)
        self._since: float | None = None  # when this reel first waited for a plan
        self._warned = False

    def plan(self, w: int) -> WindowPlan:
        """Window ``w``'s plan (raises what the planner raised)."""
        if self._since is None:
            self._since = time.perf_counter()
        plan = self.planner(w, *self.inputs(w)) if self.inline else self._from_process(w)
        self._spent += plan.seconds
        self._warn_if_slow()
        return plan

    def _from_process(self, w: int) -> WindowPlan:
        if self._process is None:
            self._process = PlanningProcess(self.planner, self.inputs, self.context)
        process = self._process
        for v in process.asked() - set(range(w, w + 1 + AHEAD)):
            process.drop(v)
        process.ask(w)
        for v in range(w + 1, w + 1 + AHEAD):
            if self.windows is None or v < self.windows:
                process.ask(v)
        try:
            plan: WindowPlan = process.result(w, self.timeout)
            return plan
        except TimeoutError:
            # plans are pure: planning here gives the same units, so a stuck planning process costs time only
            log.warning(
                "the planning process gave no plan for window %d within %.0f s (%s.plan_timeout); it is stopped "
                "and this loader plans inline from now on",
                w,
                self.timeout,
                self.options,
            )
            self.close()
            self.inline = True
        except PlanningMessageError as exc:  # e.g. an exception class that does not unpickle here
            log.warning("planning window %d: %s; it is planned here instead", w, exc)
            self.close()  # a later window starts a new planning process
        except PlanningProcessDied as exc:
            self.close()  # a later window starts a new planning process
            raise DatareelError(
                f"the planning process of the windowed stage died while planning window {w} ({exc}); if it "
                f"was killed for memory, use smaller windows, or plan inline: {self.options}(background=False)"
            ) from None
        return self.planner(w, *self.inputs(w))

    def _warn_if_slow(self) -> None:
        elapsed = time.perf_counter() - (self._since or 0.0)
        if not self._warned and self._spent > max(1.0, 0.1 * elapsed):
            self._warned = True
            log.warning(
                "the windowed stage spent %.1f s planning in %.1f s (every rank plans every window it reads, "
                "besides the workers; a windowed stage runs the encoder's first stage on every sample of it). "
                "Cheaper: a preencode_sample that only measures (the rest in postencode_sample), or "
                "datareel.Packing with a length index",
                self._spent,
                elapsed,
            )

    def close(self) -> None:
        """Stop the planning process (a later window starts a new one)."""
        process, self._process = self._process, None
        if process is not None:
            process.close()
