"""From a loader's options to what runs: the reel (which positions, in which micro-steps) and the batch maker.

This is the one place that knows which reel stage a set of options selects (plain, length-planned packing,
a windowed stage planned by the encoder) and builds the worker-side :class:`~datareel.execute.batch.BatchMaker`
that turns descriptors into batches.  The :class:`~datareel.Loader` calls :func:`build` and never asks which
kind of reel it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import OptionError
from .execute.batch import BatchMaker, ExecOptions
from .execute.encoder import ResolvedEncoder
from .execute.planner import EncoderPlanner
from .execute.workers import check_picklable
from .plan.nodes import ReelPlan
from .reel import Packing, Reel, WindowedStage, check_options, make_reel
from .sources.base import Source


@dataclass(frozen=True)
class Pipeline:
    """What a loader's options select: its reel and the picklable maker workers run."""

    reel: Reel
    maker: BatchMaker


def build(
    plan: ReelPlan,
    sources: list[Source],
    *,
    name: str,
    seed: int,
    repeat: bool,
    task_encoder: Any,
    packing: Packing | None,
    stage: WindowedStage | None,
    reseed_global_rng: bool,
    on_error: str,
    error_handler: Any,
    num_workers: int,
    multiprocessing_context: Any,
) -> Pipeline:
    """The reel and batch maker for these options (refusing options that do not go together), checked to
    pickle when they will be sent to other processes."""
    check_options(packing, stage)
    encoder = ResolvedEncoder(task_encoder, packing=packing, online=bool(getattr(stage, "pack", False)))
    if stage is None and encoder.windowed:  # a generator encoder: its outputs are planned per window
        if packing is not None:
            raise OptionError(
                "a generator encode_sample runs in the windowed stage, and datareel.Packing plans packs from "
                "lengths before encoding: pack online instead (stage=WindowedStage(pack=True) with "
                "select_samples_to_pack), or make encode_sample return one sample"
            )
        stage = WindowedStage()
    options = ExecOptions.of(seed, reseed_global_rng, on_error, packing, error_handler)
    maker = BatchMaker(sources, encoder, options)
    reel = make_reel(
        plan,
        sources,
        packing,
        repeat=repeat,
        name=name,
        stage=stage,
        planner=EncoderPlanner(maker, stage.pack) if isinstance(stage, WindowedStage) else None,
        multiprocessing_context=multiprocessing_context,
    )
    if num_workers or (isinstance(stage, WindowedStage) and stage.background):  # processes to send it to
        named = [("task_encoder", task_encoder), ("error_handler", error_handler)]
        named += [(f"dataset source {source.name!r}", source) for source in sources]
        check_picklable(maker, [(k, v) for k, v in named if v is not None], multiprocessing_context)
    return Pipeline(reel, maker)
