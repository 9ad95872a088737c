"""From the :class:`~datareel.Loader`'s arguments to its parts: where this process sits, the worker options, the
plan, the pipeline (:func:`datareel.pipeline.build`) and the first :class:`~datareel.run.Run`.

Arguments are checked in the order a user meets them (the dataset, the seed, the topology, the workers,
then what the dataset and the encoder select); nothing here is kept but :class:`Parts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dist
from .blend.build import build_plan
from .blend.tree import Blend
from .errors import OptionError, check_int
from .execute.workers import WorkerOptions
from .options import LoaderOptions
from .pipeline import build
from .plan.blocks import BlockShuffle
from .plan.layout import Layout
from .plan.locality import with_blocks
from .plan.nodes import ReelPlan
from .reel import Packing
from .run import Recipe, Run
from .sources.base import Source
from .sources.sequence import from_sequence


@dataclass(frozen=True)
class Parts:
    """What a loader is made of: its run and batch maker, and the arguments it keeps as attributes."""

    run: Run
    maker: Any
    rank: int
    group: Any
    repeat: bool
    workers: WorkerOptions
    plan: ReelPlan
    sources: list[Source]
    packing: Packing | None

    @property
    def dataset(self) -> Any:
        return self.run.recipe.dataset


def assemble(dataset: Source | Blend | Any, options: LoaderOptions) -> Parts:
    """The parts of ``Loader(dataset, **options)`` (see :class:`~datareel.Loader` for each option)."""
    o = options
    if not isinstance(dataset, (Source, Blend)):
        dataset = from_sequence(dataset)
    seed = check_int(o.seed, "seed", maximum=(1 << 64) - 1)
    rank, world_size = dist.rank_and_world(o.rank, o.world_size, o.data_parallel_group)
    layout = Layout(global_batch_size=o.global_batch_size, micro_batch_size=o.micro_batch_size, world_size=world_size)
    shuffle = check_shuffle(o.shuffle)
    blocks = shuffle.resolved(layout.schedule.common_divisor(0)) if isinstance(shuffle, BlockShuffle) else None
    recipe = Recipe(dataset, seed, True if blocks is not None else shuffle, blocks)
    workers = WorkerOptions(
        num_workers=o.num_workers,
        prefetch_factor=o.prefetch_factor,
        pin_memory=o.pin_memory,
        persistent_workers=o.persistent_workers,
        timeout=o.timeout,
        multiprocessing_context=o.multiprocessing_context,
    )
    plan, sources = build_plan(dataset, seed=recipe.seed, shuffle=recipe.shuffle)
    if blocks is not None:
        plan = with_blocks(plan, blocks)
    pipeline = build(plan, sources, name=dataset.name, seed=recipe.seed, options=o)
    run = Run.start(pipeline.reel, layout, recipe)
    return Parts(run, pipeline.maker, rank, o.data_parallel_group, bool(o.repeat), workers, plan, sources, o.packing)


SHUFFLE_RULE = (
    "Loader(shuffle=) takes True (the full shuffle), False (the reel in order) or a BlockShuffle instance (the "
    "locality shuffle)"
)


def check_shuffle(shuffle: Any) -> bool | BlockShuffle:
    """``Loader(shuffle=)`` as what the reel is made with: ``True`` / ``False`` (a numpy bool too) or a
    :class:`~datareel.BlockShuffle` instance.  Anything else (the class itself, a string such as ``"block"``, a
    number, ``None``) would only have been read by its truth value, as the full shuffle or none: refused,
    naming the value and the argument that says what was meant."""
    if isinstance(shuffle, (bool, np.bool_)):
        return bool(shuffle)
    if isinstance(shuffle, BlockShuffle):
        return shuffle
    if isinstance(shuffle, type) and issubclass(shuffle, BlockShuffle):
        fix = f"{shuffle.__name__} is the class: pass an instance, shuffle=datareel.BlockShuffle(block=16)"
    elif isinstance(shuffle, (int, np.integer)) and shuffle > 1:
        fix = f"for blocks of {shuffle} samples pass shuffle=datareel.BlockShuffle(block={shuffle})"
    elif isinstance(shuffle, (int, np.integer)) and shuffle in (0, 1):
        fix = f"pass shuffle={bool(shuffle)}"
    elif isinstance(shuffle, str) and shuffle.strip().lower() in ("block", "blocks", "locality", "blockshuffle"):
        fix = "pass shuffle=datareel.BlockShuffle(block=16)"
    elif shuffle is None:
        fix = "pass shuffle=False to read in order, or shuffle=True for the full shuffle"
    else:
        fix = "pass shuffle=True, shuffle=False or shuffle=datareel.BlockShuffle(block=16)"
    raise OptionError(f"shuffle={shuffle!r}: {SHUFFLE_RULE}; {fix}")
