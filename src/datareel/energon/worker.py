"""Energon's ``megatron.energon.worker``: ``WorkerConfig``, where this process sits (rank, world size,
workers per rank) and what happens to a failing sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as torch_dist

__all__ = ["WorkerConfig"]


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
