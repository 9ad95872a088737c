"""Reels: the stream of micro-steps a loader walks, and the cursor it keeps.

One :class:`~.base.Reel` class per kind: :class:`~.plain.PlainReel` (positions
of the plan), :class:`~.packed.PackedReel` (packs planned from lengths) and
:class:`~.windowed.WindowedReel` (encoder outputs or online packs, planned per
window).  A new stage is a new class here; the loader never asks which kind it holds.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .base import Descriptor, Reel, Step
from .cursor import Cursor, CursorQueue
from .packed import PackedReel
from .packing import Packing
from .plain import PlainReel
from .windowed import WindowedReel, WindowedStage, WindowPlanner

__all__ = [
    "Cursor",
    "CursorQueue",
    "Descriptor",
    "PackedReel",
    "Packing",
    "PlainReel",
    "Reel",
    "Step",
    "WindowedReel",
    "WindowedStage",
    "check_options",
    "make_reel",
]


def make_reel(
    plan: ReelPlan,
    sources: list[Source],
    packing: Packing | None,
    *,
    repeat: bool,
    name: str,
    stage: WindowedStage | None = None,
    planner: WindowPlanner | None = None,
    multiprocessing_context: Any = None,
) -> Reel:
    """The reel for a loader's options: windowed when ``stage`` is given (planned by ``planner``), packed
    when ``packing`` is, else plain; ``repeat=False`` reads one pass of the plan (dataset ``name`` must
    then be finite)."""
    check_options(packing, stage)
    if not repeat and plan.epoch_length is None:
        raise OptionError(
            f"repeat=False reads one pass, but {name} is an endless weighted mix; use "
            f"datareel.mix_epochized (a finite meta-epoch) or repeat=True"
        )
    pass_length = None if repeat else plan.epoch_length
    if stage is not None:
        if planner is None:
            raise OptionError("internal: a windowed stage needs a planner; please report this")
        return WindowedReel(plan, sources, stage, planner, pass_length, multiprocessing_context)
    if packing is None:
        return PlainReel(plan, pass_length)
    return PackedReel(plan, sources, packing, pass_length)


def check_options(packing: Any, stage: Any) -> None:
    """Refuse a ``packing`` / ``stage`` of the wrong type, or both together."""
    if packing is not None and not isinstance(packing, Packing):
        raise OptionError(f"packing={packing!r} must be a datareel.Packing(max_length=..., ...)")
    if stage is not None and not isinstance(stage, WindowedStage):
        raise OptionError(f"stage={stage!r} must be a datareel.WindowedStage(window=..., pack=...)")
    if stage is not None and packing is not None:
        raise OptionError(
            "packing=datareel.Packing(...) plans packs from lengths, and a windowed stage plans them from encoded "
            "samples: pass one of them (WindowedStage(pack=True) packs online with select_samples_to_pack)"
        )
