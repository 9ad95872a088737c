"""The state of a val loader in Energon's order: where this rank's pass stands, to continue it on the same topology.

A val loader in Energon's order (:mod:`.val`) reads each (rank, worker) slice in turn; its position is each
node's mark at the start of the current pass (:meth:`~.passes.Passes.mark`: batches cut, repetitions, limits)
and how many batches of that pass were handed out.  Restoring seeks the marks and leaves those batches out,
the way a pass left early continues (:class:`~.val.ValRun`).  Which samples a worker reads depends on
the world size and worker count (Energon's val order), so the state restores on the same rank, world size,
worker count, batch size and datasets only; anything else is refused naming the field.  (A train loader's
state, unlike this one, restores on any topology.)
"""

from __future__ import annotations

from typing import Any

from .. import dist
from ..errors import StateMismatchError

KIND = "datareel.energon val"


def val_state(plan: Any, passes: Any, rank: int, world_size: int) -> dict[str, Any]:
    """This rank's val position (:data:`KIND`): the pass's start marks, batches handed out, and what they mean."""
    marks, handed = plan.position(passes)
    return {
        "kind": KIND,
        "rank": rank,
        "world_size": world_size,
        "num_workers": plan.workers.num_workers,
        "batch_size": plan.bases[0].batch_size if plan.bases else None,
        "sizes": list(plan.sizes),
        "marks": _plain(marks),
        "handed": handed,
    }


def is_val_state(state: Any) -> bool:
    return isinstance(state, dict) and state.get("kind") == KIND


def restore_val(plan: Any, passes: Any, state: Any, rank: int, world_size: int) -> None:
    """Continue ``plan`` from ``state`` (:func:`val_state`), refused by name on another topology or data."""
    if not is_val_state(state):
        raise StateMismatchError(
            f"restore_state_rank: this is a val loader in Energon's order, and the state is not one it saved "
            f"({type(state).__name__}); restore a train loader's state into a train loader (get_train_dataset)",
            {"kind": (state.get("kind") if isinstance(state, dict) else type(state).__name__, KIND)},
        )
    here = val_state(plan, passes, rank, world_size)
    differ = {
        name: (state.get(name), here[name])
        for name in ("rank", "world_size", "num_workers", "batch_size", "sizes")
        if state.get(name) != here[name]
    }
    marks, handed = state.get("marks"), state.get("handed")
    if not differ and not (isinstance(marks, list) and len(marks) == len(here["marks"])):
        differ["marks"] = (marks, here["marks"])
    if not differ and not (isinstance(handed, int) and handed >= 0):
        differ["handed"] = (handed, 0)
    if differ:
        fields = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in differ.items())
        raise StateMismatchError(
            f"restore_state_rank: this val loader state does not fit this loader ({fields}). A val loader in "
            f"Energon's order reads per (rank, worker) slices, so its state continues on the same rank, world "
            f"size, worker count, batch size and datasets only; build the val loader that way, or start its pass "
            f"afresh (Megatron reads val loaders afresh at every evaluation)",
            differ,
        )
    plan.continue_at(passes, marks, handed)


def _plain(value: Any) -> Any:
    """Marks as JSON values (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def val_states(mine: dict[str, Any], config: Any, dst_rank: int) -> list[dict[str, Any]] | None:
    """Every rank's val state (``save_state_global``): the list on ``dst_rank`` (a global rank), else ``None``."""
    group = config.data_parallel_group
    states = dist.gather_to_all(mine, group) if dist.initialised() and config.world_size > 1 else [mine]
    here = dist.global_rank(group, config.rank) if dist.initialised() and config.world_size > 1 else config.rank
    return states if here == dst_rank else None


def this_rank_val(state: Any, config: Any, src_rank: int | None) -> Any:
    """This rank's entry of a ``save_state_global`` list (broadcast from ``src_rank`` when only it has the list)."""
    if src_rank is not None and dist.initialised() and config.world_size > 1:
        state = dist.broadcast(state, src_rank, config.data_parallel_group)
    if isinstance(state, (list, tuple)):
        mine = [s for s in state if isinstance(s, dict) and s.get("rank") == config.rank]
        return mine[0] if mine else (state[0] if len(state) == 1 else None)
    return state
