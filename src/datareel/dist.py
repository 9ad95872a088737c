"""torch.distributed helpers: where this process sits in the data-parallel group."""

from __future__ import annotations

from typing import Any

import torch.distributed as torch_dist

from .errors import TopologyError


def rank_and_world(rank: int | None, world_size: int | None, group: Any = None) -> tuple[int, int]:
    """Resolve ``(rank, world_size)``: explicit values, else torch.distributed's, else ``(0, 1)``."""
    initialised = torch_dist.is_available() and torch_dist.is_initialized()
    if world_size is None:
        world_size = torch_dist.get_world_size(group) if initialised else 1
    if rank is None:
        if initialised:
            rank = torch_dist.get_rank(group)
        elif world_size == 1:
            rank = 0
        else:
            raise TopologyError(
                f"world_size={world_size} was given without rank, and torch.distributed is not "
                f"initialised; pass rank= too (0 <= rank < {world_size})"
            )
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(f"{name}={value!r} must be an integer")
    if world_size < 1 or not 0 <= rank < world_size:
        raise TopologyError(
            f"rank={rank} is not in [0, world_size={world_size}); pass 0 <= rank < world_size"
        )
    return rank, world_size
