"""Reels: the stream of micro-steps a loader walks, and the cursor it keeps.

One :class:`~.base.Reel` class per kind: :class:`~.plain.PlainReel` (positions
of the plan) and :class:`~.packed.PackedReel` (packs planned from lengths).  A
new stage is a new class here; the loader never asks which kind it holds.
"""

from __future__ import annotations

from ..errors import OptionError
from ..plan.nodes import ReelPlan
from ..sources.base import Source
from .base import Descriptor, Reel, Step
from .cursor import Cursor, CursorQueue
from .packed import PackedReel
from .packing import Packing
from .plain import PlainReel

__all__ = ["Cursor", "CursorQueue", "Descriptor", "PackedReel", "Packing", "PlainReel", "Reel", "Step", "make_reel"]


def make_reel(plan: ReelPlan, sources: list[Source], packing: Packing | None, *, repeat: bool, name: str) -> Reel:
    """The reel for a loader's options: packed when ``packing`` is given, else plain; ``repeat=False``
    reads one pass of the plan (dataset ``name`` must then be finite)."""
    if packing is not None and not isinstance(packing, Packing):
        raise OptionError(f"packing={packing!r} must be a datareel.Packing(max_length=..., ...)")
    if not repeat and plan.epoch_length is None:
        raise OptionError(
            f"repeat=False reads one pass, but {name} is an endless weighted mix; use "
            f"datareel.mix_epochized (a finite meta-epoch) or repeat=True"
        )
    pass_length = None if repeat else plan.epoch_length
    if packing is None:
        return PlainReel(plan, pass_length)
    return PackedReel(plan, sources, packing, pass_length)
