"""torch.distributed helpers: where this process sits, and collective state save/restore.

``group`` is the loader's data-parallel process group (``None`` = the default
group).  Ranks here are ranks *within that group*; tensor- and
pipeline-parallel peers, which share a data-parallel rank, never talk through it.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as torch_dist

from .errors import DatareelError, ForeignStateError, StateMismatchError, TopologyError, check_int


def initialised() -> bool:
    return torch_dist.is_available() and torch_dist.is_initialized()


def rank_and_world(rank: int | None, world_size: int | None, group: Any = None) -> tuple[int, int]:
    """Resolve ``(rank, world_size)``: explicit values, else the group's, else ``(0, 1)``."""
    if group is not None and not initialised():
        raise TopologyError(
            "data_parallel_group was given but torch.distributed is not initialised; call "
            "torch.distributed.init_process_group() before building the loader"
        )
    if world_size is None:
        world_size = torch_dist.get_world_size(group) if initialised() else 1
    if rank is None:
        if initialised():
            rank = torch_dist.get_rank(group)
        elif world_size == 1:
            rank = 0
        else:
            raise TopologyError(
                f"world_size={world_size} was given without rank, and torch.distributed is not "
                f"initialised; pass rank= too (0 <= rank < {world_size})"
            )
    rank = check_int(rank, "rank", error=TopologyError)
    world_size = check_int(world_size, "world_size", minimum=1, error=TopologyError)
    if world_size < 1 or not 0 <= rank < world_size:
        raise TopologyError(f"rank={rank} is not in [0, world_size={world_size}); pass 0 <= rank < world_size")
    return rank, world_size


def check_group(group: Any, world_size: int) -> None:
    """Refuse collectives that cannot work: no torch.distributed for ``world_size > 1``, or a
    loader whose world size differs from its group's (ranks simulated in one process)."""
    if not initialised():
        if world_size != 1:
            raise DatareelError(
                f"save_state_global/restore_state_global on a loader with world_size={world_size} "
                f"need torch.distributed initialised; without it use state_dict()/load_state_dict() "
                f"on each rank"
            )
        return
    size = torch_dist.get_world_size(group)
    if size != world_size:
        raise DatareelError(
            f"the loader's world_size={world_size} differs from its process group's size {size}; "
            f"build the loader with data_parallel_group= the group it reads for, or without an "
            f"explicit world_size"
        )


def gather_to_all(obj: Any, group: Any) -> list[Any]:
    """Every rank's ``obj``, in group-rank order, on every rank."""
    out: list[Any] = [None] * torch_dist.get_world_size(group)
    torch_dist.all_gather_object(out, obj, group=group)
    return out


def broadcast(obj: Any, src_rank: int, group: Any) -> Any:
    """``obj`` from group rank ``src_rank``, on every rank."""
    size = torch_dist.get_world_size(group)
    if isinstance(src_rank, bool) or not isinstance(src_rank, int) or not 0 <= src_rank < size:
        raise TopologyError(f"src_rank={src_rank!r} is not a rank of the data-parallel group (0 <= rank < {size})")
    box = [obj]
    torch_dist.broadcast_object_list(box, src=global_rank(group, src_rank), group=group)
    return box[0]


def global_rank(group: Any, group_rank: int) -> int:
    if group is None or group is torch_dist.group.WORLD:
        return group_rank
    return torch_dist.get_global_rank(group, group_rank)


def check_agreement(states: list[Any], what: str) -> None:
    """Raise on every rank unless all gathered states are present and identical."""
    missing = [r for r, st in enumerate(states) if st is None]
    if missing:
        raise ForeignStateError(f"{what}: ranks {missing} passed no state; every rank must pass the saved state")
    if all(st == states[0] for st in states):
        return
    cursors = [st.get("cursor") if isinstance(st, dict) else st for st in states]
    values = sorted(set(map(repr, cursors)))
    if len(values) > 1:
        majority = max(values, key=lambda v: sum(repr(c) == v for c in cursors))
        odd = {r: c for r, c in enumerate(cursors) if repr(c) != majority}
        raise StateMismatchError(
            f"{what}: ranks disagree on the reel cursor: "
            + ", ".join(f"rank {r} at {c}" for r, c in odd.items())
            + f" while the other ranks are at {majority} (cursors by rank: {cursors}); a rank "
            f"consumed a different number of micro-batches, so no consistent checkpoint exists. "
            f"Make every rank take the same number of batches before saving."
        )
    odd_ranks = [r for r, st in enumerate(states) if st != states[0]]
    raise StateMismatchError(
        f"{what}: ranks {odd_ranks} hold a state whose spec differs from rank 0's; every rank "
        f"must build its loader with the same dataset, seed, shuffle and global_batch_size"
    )


def save_global(loader: Any, dst_rank: int = 0) -> dict[str, Any] | None:
    """``loader.save_state_global(dst_rank=0)``: gather every rank's state, check they agree, return it on
    ``dst_rank`` (a rank of the data-parallel group; the others get ``None``).

    Collective over the data-parallel group: every rank must call it.  Ranks whose cursors
    differ (one consumed a micro-batch more than the others) make every rank raise
    :class:`~datareel.StateMismatchError` naming them.  Without torch.distributed (one process) it
    returns ``loader.state_dict()``.  ``dst_rank`` is a rank within the data-parallel group.
    """
    if isinstance(dst_rank, bool) or not isinstance(dst_rank, int) or not 0 <= dst_rank < loader.world_size:
        raise TopologyError(f"dst_rank={dst_rank!r} is not a rank of this loader (0 <= rank < {loader.world_size})")
    state = loader.state_dict()
    check_group(loader.group, loader.world_size)
    if initialised():
        check_agreement(gather_to_all(state, loader.group), "save_state_global")
    return state if loader.rank == dst_rank else None


def restore_global(
    loader: Any, state: dict[str, Any] | None, src_rank: int | None = 0, *, allow_batch_size_change: bool = False
) -> None:
    """``loader.restore_state_global(state, src_rank=0, *, allow_batch_size_change=False)``: one state restored
    on every rank of the group (collective; see :meth:`~datareel.Loader.load_state_dict`).

    ``src_rank=r``: only rank ``r``'s ``state`` matters and is broadcast; the others may pass
    ``None``.  ``src_rank=None``: every rank passes the state itself, and all must pass the same one.
    """
    check_group(loader.group, loader.world_size)
    if not initialised():
        if state is None:
            raise ForeignStateError("restore_state_global(None): pass the state returned by save_state_global")
        loader.load_state_dict(state, allow_batch_size_change=allow_batch_size_change)
        return
    if src_rank is None:
        check_agreement(gather_to_all(state, loader.group), "restore_state_global(src_rank=None)")
    else:
        state = broadcast(state if loader.rank == src_rank else None, src_rank, loader.group)
        if state is None:
            raise ForeignStateError(
                f"restore_state_global: src_rank={src_rank} passed None; pass the saved state "
                f"on that rank (or src_rank=None to pass it on every rank)"
            )
    loader.load_state_dict(state, allow_batch_size_change=allow_batch_size_change)
