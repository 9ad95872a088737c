"""From a loader's options to what runs: the reel (which positions, in which micro-steps) and the batch maker.

This is the one place that turns options into a reel stage.  No stage options: the plain reel.  Else a
:class:`~datareel.reel.window.WindowReel` over the stage's planner: ``packing=datareel.Packing(...)``
plans packs from lengths, ``stage=datareel.WindowedStage(...)`` (the default for a generator
``encode_sample``) is planned by the encoder (:class:`~datareel.execute.planner.EncoderPlanner`, which
reads and encodes with the workers' batch maker), and any other ``stage=`` object implementing
:class:`~datareel.reel.stage.Stage` makes its own planner from a :class:`~datareel.reel.stage.StageContext`.
The worker-side :class:`~datareel.execute.batch.BatchMaker` turns every reel's descriptors into batches
alike.  The :class:`~datareel.Loader` calls :func:`build` and never asks which kind of reel it holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import OptionError
from .execute.batch import BatchMaker, ExecOptions
from .execute.encoder import ResolvedEncoder
from .execute.planner import EncoderPlanner
from .execute.threads import check_map_threads
from .execute.workers import check_picklable
from .options import LoaderOptions
from .plan.locality import block_span, read_blocks
from .plan.nodes import ReelPlan
from .reel import Reel, StageContext, WindowedStage, WindowPlanner, check_options, make_reel
from .settings import check_environment
from .sources.base import Source


@dataclass(frozen=True)
class Pipeline:
    """What a loader's options select: its reel and the picklable maker workers run."""

    reel: Reel
    maker: BatchMaker


def build(plan: ReelPlan, sources: list[Source], *, name: str, seed: int, options: LoaderOptions) -> Pipeline:
    """The reel and batch maker for a loader's ``options`` (``seed``: the checked one; refusing options that do
    not go together, and a bad ``DATAREEL_*`` environment variable: :mod:`datareel.settings`), checked to
    pickle when they will be sent to other processes."""
    o = options
    packing, stage = o.packing, o.stage
    check_environment()  # read up front: the places that use them are hints, which must not fail a batch
    check_options(packing, stage)
    encoder = ResolvedEncoder(o.task_encoder, packing=packing, online=isinstance(stage, WindowedStage) and stage.pack)
    if encoder.windowed and not isinstance(stage, WindowedStage):  # a generator: its outputs are planned per window
        if packing is not None or stage is not None:
            what = "datareel.Packing plans packs from lengths" if packing is not None else f"stage={stage!r} plans"
            raise OptionError(
                f"a generator encode_sample runs in the windowed stage, and {what} before encoding: pack online "
                f"instead (stage=WindowedStage(pack=True) with select_samples_to_pack), or make encode_sample "
                f"return one sample"
            )
        stage = WindowedStage()
    chosen = packing if packing is not None else stage
    blocks = read_blocks(plan)  # BlockShuffle: sources read in blocks, and in a bucket fetched a period ahead
    in_bucket = any(getattr(sources[s], "prefetches", False) for s in blocks)
    # the plain reel only: a process's micro-batches are evenly spaced there
    ahead = (plan, block_span(plan)) if chosen is None and in_bucket else None
    maker = _maker(sources, encoder, seed, o, tuple(sorted(blocks.items())), ahead)
    planner: WindowPlanner | None = None
    if isinstance(chosen, WindowedStage):  # the encoder's own stage: planned with the workers' maker (execute/)
        planner = EncoderPlanner(maker, chosen)
    elif chosen is not None:
        planner = chosen.planner(StageContext(plan, sources, seed, maker))
    reel = make_reel(
        plan,
        sources,
        chosen,
        planner,
        repeat=bool(o.repeat),
        name=name,
        multiprocessing_context=o.multiprocessing_context,
    )
    if o.num_workers or (chosen is not None and chosen.background):  # processes to send it to
        extra: list[tuple[str, Any]] = []
        if chosen is not None and chosen.background and not isinstance(chosen, WindowedStage):
            extra.append((f"the planner of {type(chosen).__name__}", planner))
        _check_sent(maker, sources, o, extra)
    return Pipeline(reel, maker)


def batch_maker(sources: list[Source], *, seed: int, options: LoaderOptions) -> BatchMaker:
    """The batch maker alone, made and checked as :func:`build` makes it, for an order a facade keeps itself
    (``datareel.energon``'s val passes, driven by :class:`datareel.iteration.Driver`): one output per
    sample, no reel stage (``packing`` and ``stage`` refused, as is a generator ``encode_sample``)."""
    check_environment()
    if options.packing is not None or options.stage is not None:
        raise OptionError("batch_maker: packing and stage= plan a reel; build the loader's pipeline with build()")
    encoder = ResolvedEncoder(options.task_encoder)
    if encoder.windowed:
        raise OptionError("batch_maker: a generator encode_sample runs in the windowed stage; use build()")
    maker = _maker(sources, encoder, seed, options, (), None)
    if options.num_workers:
        _check_sent(maker, sources, options, [])
    return maker


def _maker(
    sources: list[Source], encoder: ResolvedEncoder, seed: int, o: LoaderOptions, blocks: tuple, ahead: Any
) -> BatchMaker:
    options = ExecOptions.of(seed, o.reseed_global_rng, o.on_error, o.packing, o.error_handler)
    options = dataclasses.replace(
        options,
        map_threads=check_map_threads(o.map_threads, options.reseed_global, encoder.reseeds),  # execute/threads.py
        read_blocks=blocks,
        ahead=ahead,
    )
    return BatchMaker(sources, encoder, options)


def _check_sent(maker: BatchMaker, sources: list[Source], o: LoaderOptions, extra: list[tuple[str, Any]]) -> None:
    """The maker pickles, to be sent to other processes; else the part that does not is named."""
    named = [("task_encoder", o.task_encoder), ("error_handler", o.error_handler)]
    named += [(f"dataset source {source.name!r}", source) for source in sources] + extra
    check_picklable(maker, [(k, v) for k, v in named if v is not None], o.multiprocessing_context)
