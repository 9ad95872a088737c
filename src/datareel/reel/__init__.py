"""Reels: the stream of micro-steps a loader walks, and the cursor it keeps.

Two kinds of :class:`~.base.Reel`: :class:`~.plain.PlainReel` (every position of the plan) and
:class:`~.window.WindowReel` (units planned window by window by a :class:`~.window.WindowPlanner`).
A stage is options with a planner (:class:`~.stage.Stage`): length-planned packing
(:class:`~.packed.Packing`), the encoder's windowed stage (:class:`~.windowed.WindowedStage`, planned
in :mod:`datareel.execute.planner`), or a user's own; the loader never asks which it holds.

- :mod:`.base` — ``Descriptor`` (one rank's units of a micro-step), ``Step``, the ``Reel`` protocol;
- :mod:`.units` — ``Units``: a window's units as flat arrays;
- :mod:`.planner` — the ``WindowPlanner`` protocol and ``WindowPlan``; :mod:`.window` — ``WindowReel``;
- :mod:`.background` — where planning runs (inline, or a planning process ahead: :mod:`.planning`);
- :mod:`.stage` — the ``Stage`` options protocol and the ``StageContext`` a planner is made from;
- :mod:`.packed` — ``Packing`` and its ``LengthPlanner``; :mod:`.windowed` — ``WindowedStage``;
- :mod:`.plain` — ``PlainReel``; :mod:`.cursor` — ``Cursor``; :mod:`.sampler` — the DataLoader's sampler.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .base import Descriptor, Reel, Step
from .cursor import Cursor, CursorQueue
from .packed import LengthPlanner, PackedReel, Packing
from .plain import PlainReel
from .planner import WindowOptions, WindowPlan, WindowPlanner
from .stage import Stage, StageContext, check_stage
from .units import Units
from .window import WindowReel, patience
from .windowed import WindowedReel, WindowedStage

__all__ = [
    "Cursor",
    "CursorQueue",
    "Descriptor",
    "LengthPlanner",
    "PackedReel",
    "Packing",
    "PlainReel",
    "Reel",
    "Stage",
    "StageContext",
    "Step",
    "Units",
    "WindowOptions",
    "WindowPlan",
    "WindowPlanner",
    "WindowReel",
    "WindowedReel",
    "WindowedStage",
    "check_options",
    "make_reel",
]


def make_reel(
    plan: ReelPlan,
    sources: list[Source],
    stage: WindowOptions | None,
    planner: WindowPlanner | None,
    *,
    repeat: bool,
    name: str,
    multiprocessing_context: Any = None,
) -> Reel:
    """The reel for a loader's options: a window reel of ``planner`` over windows of ``stage`` when given,
    else plain; ``repeat=False`` reads one pass of the plan (dataset ``name`` must then be finite)."""
    if not repeat and plan.epoch_length is None:
        raise OptionError(
            f"repeat=False reads one pass, but {name} is an endless weighted mix; use "
            f"datareel.mix_epochized (a finite meta-epoch) or repeat=True"
        )
    pass_length = None if repeat else plan.epoch_length
    if stage is None or planner is None:
        return PlainReel(plan, pass_length)
    limit = patience(plan, [len(source) for source in sources], stage.window)
    return WindowReel(
        plan, stage, pass_length, planner, multiprocessing_context=multiprocessing_context, patience=limit
    )


def check_options(packing: Any, stage: Any) -> None:
    """Refuse a ``packing`` / ``stage`` of the wrong type, or both together."""
    if packing is not None and not isinstance(packing, Packing):
        raise OptionError(f"packing={packing!r} must be a datareel.Packing(max_length=..., ...)")
    if stage is not None and not isinstance(stage, WindowedStage):
        check_stage(stage)
    if stage is not None and packing is not None:
        raise OptionError(
            "packing=datareel.Packing(...) plans packs from lengths, and a windowed stage plans them from encoded "
            "samples: pass one of them (WindowedStage(pack=True) packs online with select_samples_to_pack)"
        )
