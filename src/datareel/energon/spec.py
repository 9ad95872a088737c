"""What Energon's dataset factories return and take: ``WorkerConfig`` (where this process sits), the
``DatasetSpec`` recipe that ``get_train_dataset`` / ``get_val_dataset`` build, and the ``LimitDataset`` /
``RepeatDataset`` wrappers it carries (:class:`Limit`, :class:`Repeat`).

Plain values: :mod:`.datasets` makes them, :mod:`.loader` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch.distributed as torch_dist


@dataclass
class WorkerConfig:
    """Where this process sits: ``rank`` / ``world_size`` of the data-parallel group, workers per rank.

    ``seed_offset`` is datareel's seed.  The debug fields are accepted and ignored.
    """

    rank: int
    world_size: int
    num_workers: int
    data_parallel_group: Any = None
    seed_offset: int = 0
    worker_debug_path: str | None = None
    worker_log_level: int = 0

    @staticmethod
    def default_worker_config(num_workers: int = 4, data_parallel_group: Any = None) -> WorkerConfig:
        """Rank and world size from torch.distributed when initialised, else a single rank."""
        if torch_dist.is_available() and torch_dist.is_initialized():
            return WorkerConfig(
                rank=torch_dist.get_rank(data_parallel_group),
                world_size=torch_dist.get_world_size(data_parallel_group),
                num_workers=num_workers,
                data_parallel_group=data_parallel_group,
            )
        return WorkerConfig(rank=0, world_size=1, num_workers=num_workers, data_parallel_group=data_parallel_group)


@dataclass(frozen=True)
class Limit:
    """``LimitDataset(..., length, reset_after_epoch)``: at most ``length`` batches per pass, then the
    wrapped dataset starts again (Energon 7.4.1 resets it whatever ``reset_after_epoch`` says)."""

    length: int
    reset_after_epoch: bool = False


@dataclass(frozen=True)
class Repeat:
    """``RepeatDataset(..., repeats, restart)``: the wrapped dataset again each time it ends,
    ``repeats`` times (``None``: endlessly)."""

    repeats: float | None = None
    restart: bool = True


@dataclass
class DatasetSpec:
    """What ``get_train_dataset`` / ``get_val_dataset`` return: the recipe, built by a loader call.

    ``dataset`` is the opened dataset (opened at once, so a wrong path fails where it is given);
    ``wrappers`` the ``LimitDataset`` / ``RepeatDataset`` around it, innermost first."""

    path: Any
    split_part: str
    worker_config: WorkerConfig
    batch_size: int | None
    global_batch_size: Any  # int, datareel.RampUp, [(from_global_batch, G), ...] or None
    task_encoder: Any
    repeat: bool
    shuffle: bool
    virtual_epoch_length: int = 0
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    packing_buffer_size: int | None = None  # online packing: windows of this many input samples
    handler: Any = None  # Energon's error handler: told of every failing sample (see EnergonLoader)
    allow_batch_size_change: bool = False  # restores accept another global batch size at a batch boundary
    dataset: Any = None  # the opened Source or Blend
    wrappers: tuple[Limit | Repeat, ...] = ()
    val: bool = False  # from get_val_dataset(s): read in Energon's val order (datareel.energon.val)
    drop_last: bool = False  # get_val_dataset(batch_drop_last=True): each worker drops its partial batch
