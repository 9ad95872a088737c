"""The seam for reel stages: options that make a window planner (``Loader(stage=...)``).

A stage is an options object (a frozen dataclass, say) with the three fields a window reel reads
(``window``, ``background``, ``plan_timeout``) and ``planner(context)``, which returns its
:class:`~.window.WindowPlanner`.  :func:`datareel.pipeline.build` hands it a :class:`StageContext` and
puts the planner in a :class:`~.window.WindowReel`; the planner's units then run in the workers like
any others.  ``datareel.Packing`` is such a stage; ``datareel.WindowedStage`` is the encoder's own,
planned by :mod:`datareel.execute.planner` with the workers' batch maker.

Example (every ``k`` consecutive positions one pack)::

    @dataclass(frozen=True)
    class FixedPacks:
        k: int
        window: int = 64
        background: bool = False
        plan_timeout: float = 300.0

        def planner(self, context):
            return FixedPlanner(self.k, self.window)

    class FixedPlanner(datareel.reel.WindowPlanner):
        def __init__(self, k, window): self.k, self.window = k, window
        def spec(self): return {"stage": {"window": self.window, "fixed_packs": self.k}}
        def __call__(self, window, positions, source_ids, indices):
            groups = [range(a, min(a + self.k, len(positions))) for a in range(0, len(positions), self.k)]
            return WindowPlan(Units.of(groups, positions, source_ids, indices))

    loader = datareel.Loader(data, global_batch_size=8, micro_batch_size=2, stage=FixedPacks(3),
                             task_encoder=MyPacker())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import OptionError
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .planner import WindowPlanner


@dataclass(frozen=True)
class StageContext:
    """What a stage's planner may use: the reel ``plan``, its ``sources`` (leaf ``i`` of the plan is
    ``sources[i]``; read lengths or metadata from them), the loader's ``seed``, and ``maker``, the
    workers' batch maker (:class:`datareel.execute.batch.BatchMaker`: it reads and encodes a sample
    exactly as a worker will)."""

    plan: ReelPlan
    sources: list[Source]
    seed: int
    maker: Any


@runtime_checkable
class Stage(Protocol):
    """Options of a reel stage: the window reel's three fields and the planner they make."""

    @property
    def window(self) -> int:
        """Input positions planned together (a restore plans one window)."""
        ...

    @property
    def background(self) -> bool:
        """Plan in a planning process, a few windows ahead (the planner must pickle under spawn)."""
        ...

    @property
    def plan_timeout(self) -> float:
        """Seconds to wait for the planning process's plan of a window before planning it inline."""
        ...

    def planner(self, context: StageContext) -> WindowPlanner:
        """This stage's planner for one loader."""
        ...


def check_stage(stage: Any) -> None:
    """Refuse ``stage`` unless it has the fields of :class:`Stage` with usable values."""
    missing = [name for name in ("window", "background", "plan_timeout", "planner") if not hasattr(stage, name)]
    if missing or not callable(stage.planner):
        raise OptionError(
            f"stage={stage!r} must be a datareel.WindowedStage(window=..., pack=...), or options of your own "
            f"stage with window, background, plan_timeout and planner(context) (datareel.reel.Stage); it lacks "
            f"{missing or ['a callable planner']}"
        )
    window = stage.window
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise OptionError(f"stage {type(stage).__name__}(window={window!r}) must be an integer >= 1")
    check_timeout(stage.plan_timeout, type(stage).__name__)


def check_timeout(timeout: Any, where: str) -> None:
    """Refuse a ``plan_timeout`` that is not a number of seconds > 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise OptionError(f"{where}(plan_timeout={timeout!r}) must be a number of seconds > 0")
