"""Energon's state conventions over datareel's one state: a global state's list of per-rank states read as
one (:func:`one_state`), the restored states agreed across the data-parallel group (:func:`state_to_adopt`),
and a changed global batch size explained in ``get_train_dataset``'s terms (:func:`batch_size_mismatch`).

Megatron saves ``save_state_rank()`` into one file per rank and restores only where a file exists, so after
the world grows the new ranks restored nothing; :func:`state_to_adopt` lets them adopt the others' state.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import torch.distributed as torch_dist

from .. import dist
from ..errors import DatareelError, ForeignStateError, StateDamagedError, StateMismatchError
from ..loader import Loader
from ..plan.schedule import BatchSchedule
from .foreign import refuse_energon_state

log = logging.getLogger("datareel")


def one_state(state: Any, where: str = "restore_state_rank") -> Any:
    """A datareel state from a per-rank dict or an Energon-style list of per-rank states.  A state saved by
    megatron.energon's savable loader, and a list that holds anything but datareel states, are refused by
    name (:class:`~datareel.ForeignStateError`) before anything in them is compared."""
    refuse_energon_state(state, where)
    if not isinstance(state, (list, tuple)):
        return state  # the loader checks it (a dict of datareel's format, else a named refusal)
    states = [s for s in state if s is not None]
    if not states:
        raise StateDamagedError(f"{where}: the global state holds no rank's state")
    texts = [_text(s, i, where) for i, s in enumerate(state) if s is not None]
    if any(t != texts[0] for t in texts[1:]):
        raise ForeignStateError(
            f"{where}: the global state holds different states per rank; it was not written by "
            f"datareel's save_state_global"
        )
    return states[0]


def _text(state: Any, i: int, where: str) -> str:
    """Item ``i`` of a global state as JSON (a datareel state is a JSON dict), to compare the items exactly;
    anything else is refused naming the item (comparing a tensor, say, would raise an unnamed error)."""
    if isinstance(state, dict):
        try:
            return json.dumps(state, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            pass
    raise ForeignStateError(
        f"{where}: item {i} of the global state is a {type(state).__name__} that is not a datareel loader state "
        f"(a JSON dict, as save_state_rank returns); a global state is the list save_state_global returns"
    )


def gather_restored(restored: Any, loader: Loader) -> list[Any] | None:
    """Collective over ``loader``'s data-parallel group: what every rank restored (``None`` where nothing), in
    rank order; ``None`` where there is no group to ask (one rank, no torch.distributed, simulated ranks)."""
    group, world = loader.group, loader.world_size
    if not (dist.initialised() and world > 1) or torch_dist.get_world_size(group) != world:
        return None
    return dist.gather_to_all(restored, group)


def state_to_adopt(
    restored: dict[str, Any] | None, loader: Loader, gathered: list[Any] | None = None
) -> dict[str, Any] | None:
    """Collective over ``loader``'s data-parallel group (one all-gather of the ~200-byte restored states): the
    state this rank must restore because it restored none (``restored is None``) while others did; ``None``
    when there is nothing to adopt (or nothing to agree with: one rank, no torch.distributed, ranks simulated
    in one process).  Ranks that restored different states raise :class:`~datareel.StateMismatchError`,
    naming the ranks."""
    everyone = gathered if gathered is not None else gather_restored(restored, loader)
    if everyone is None:
        return None
    states = {r: s for r, s in enumerate(everyone) if s is not None}
    if not states:
        return None
    first = min(states)
    odd = sorted(r for r, s in states.items() if s != states[first])
    if odd:
        raise StateMismatchError(
            f"ranks restored different loader states: ranks {odd} differ from rank {first}'s (ranks that "
            f"restored a state: {sorted(states)}); every rank must restore the same checkpoint step, or "
            f"none (a rank without a state file adopts the others')"
        )
    if restored is not None:
        return None
    log.info("rank %d restored no loader state; adopting the state restored by ranks %s", loader.rank, sorted(states))
    return states[first]


def batch_size_mismatch(exc: StateMismatchError, explicit_global: bool) -> StateMismatchError | None:
    """The error to raise instead of ``exc`` when the global batch size differs and ``get_train_dataset`` got
    no ``global_batch_size`` (it was ``batch_size × world_size``): what to pass to resume; else ``None``."""
    if "global_batch_size" not in exc.differences or explicit_global:
        return None
    saved, now = (_describe(v) for v in exc.differences["global_batch_size"])
    return StateMismatchError(
        f"the checkpoint's global batch is {saved} samples, this job's would be {now} (batch_size × "
        f"world_size, since get_train_dataset got no global_batch_size): restoring would change the "
        f"global batches. Pass global_batch_size={saved} to get_train_dataset (datareel then uses "
        f"gradient accumulation: batch_size × world_size must divide it) to resume on this world "
        f"size with the same global batches; or pass allow_batch_size_change=True to get_train_dataset "
        f"to continue the same samples in global batches of the new size, from a global-batch "
        f"boundary.\n{exc}",
        exc.differences,
    )


def _describe(schedule: Any) -> Any:
    """A state's ``global_batch_size`` as get_train_dataset takes it: the int, or the schedule in words."""
    if isinstance(schedule, int):
        return schedule
    try:
        return BatchSchedule.from_spec(schedule).describe()
    except DatareelError:
        return schedule
