"""The windowed stage's options: a reel of encoder outputs (or online packs), planned window by window.

Window ``w`` is input positions ``[w·window, (w+1)·window)``.  Its planner
(:class:`datareel.execute.planner.EncoderPlanner`) reads the window's samples, runs the encoder's
first stage under the per-position seeds and returns the window's units in order: single outputs
``(position, k)`` of a generator ``encode_sample`` (0, 1 or more per input), or packs of such outputs
chosen by the user's ``select_samples_to_pack``.  The window reel (:mod:`.window`) streams them; a
point in it is ``(window, offset)`` as for length-planned packing, so a restore plans one window on
any topology.

Every rank plans every window it reads (the units must be known before they are laid out over
ranks).  With ``background=True`` the planning runs in one planning process per loader, a few
windows ahead of the training thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import check_int
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .planner import WindowPlan, WindowPlanner
from .stage import check_timeout
from .window import WindowReel, patience

__all__ = ["WindowPlan", "WindowPlanner", "WindowedReel", "WindowedStage"]  # the first two kept here too


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
        check_timeout(self.plan_timeout, "WindowedStage")

    def to_json(self, encoder: str | None = None) -> dict[str, Any]:
        """The state's ``spec.stage``: the window, the packing mode and ``encoder``, the task encoder's
        class (``module.Class``, or ``None``), which its planner adds.  ``background`` and
        ``plan_timeout`` may change between save and restore."""
        return {"window": self.window, "pack": self.pack, "encoder": encoder}

    @classmethod
    def from_json(cls, data: dict[str, Any], **options: Any) -> WindowedStage:
        """The options a state's ``spec.stage`` records (a ``KeyError`` for a field it lacks; its
        ``encoder`` is the planner's, read by whoever rebuilds the encoder); ``options``:
        ``background``, ``plan_timeout``."""
        return cls(window=data["window"], pack=data["pack"], **options)


class WindowedReel(WindowReel):
    """A window reel of the windowed stage (the constructor kept from before :class:`WindowReel`):
    ``planner`` plans its windows (any :class:`~.window.WindowPlanner`)."""

    def __init__(
        self,
        plan: ReelPlan,
        sources: list[Source],
        stage: WindowedStage,
        planner: WindowPlanner,
        pass_length: int | None,
        multiprocessing_context: Any = None,
    ):
        limit = patience(plan, [len(source) for source in sources], stage.window)
        super().__init__(
            plan, stage, pass_length, planner, multiprocessing_context=multiprocessing_context, patience=limit
        )
