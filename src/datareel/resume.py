"""Restoring a state into a run: its cursor, and the global batch schedule the rest of the run follows.

A state records the schedule that cut its global batches (``spec.global_batch_size``: the rule and,
after a deliberate change, the global batch and position from which it applies).  Restoring it

- into a run declaring the same rule continues that schedule exactly (its anchor included);
- into a run declaring another rule is refused (:class:`~datareel.StateMismatchError`, naming
  ``allow_batch_size_change``), unless the caller passes ``allow_batch_size_change=True`` and the
  state's cursor lies at a global-batch boundary of the saved schedule: the run's rule then applies
  from that global batch on, starting at the cursor.  The samples that follow are the same; only the
  cuts between global batches move.

:meth:`datareel.run.Run.restore` calls :func:`restore_layout` with itself; anything that answers
:class:`Restorable` will do.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from .errors import DatareelError, TopologyError
from .plan.layout import Layout
from .plan.schedule import BatchSchedule
from .reel import Cursor, Reel
from .state import check_state, read_state

log = logging.getLogger("datareel")


def saved_schedule(state: Any) -> BatchSchedule | None:
    """The schedule a state was saved with; ``None`` when it cannot be read (``read_state`` then says why)."""
    spec = state.get("spec") if isinstance(state, dict) else None
    if not isinstance(spec, dict) or "global_batch_size" not in spec:
        return None
    try:
        return BatchSchedule.from_spec(spec["global_batch_size"])
    except DatareelError:
        return None


class Restorable(Protocol):
    """What a restore reads of the run it restores into (:class:`datareel.run.Run` answers it)."""

    @property
    def layout(self) -> Layout:
        """The topology restored onto, with the schedule it declares."""
        ...

    def spec(self, layout: Layout | None = None) -> dict[str, Any]:
        """The spec a matching state holds, with ``layout``'s global batch size."""
        ...

    @property
    def reel(self) -> Reel:
        """The reel (its ``at_end(cursor)`` says whether a finite pass ended at a cursor)."""
        ...


def restore_layout(run: Restorable, state: Any, allow_batch_size_change: bool) -> tuple[Layout, Cursor]:
    """The layout and cursor ``run`` continues with after restoring ``state`` (see the module doc).

    The state's size, types and check are verified first (:func:`~datareel.state.check_state`): nothing
    in it is resolved before."""
    check_state(state)
    layout, saved = run.layout, saved_schedule(state)
    if saved is not None and saved.rule == layout.schedule.rule:  # the same rule: keep the saved anchor
        layout = layout.with_schedule(saved)
        return layout, read_state(state, run.spec(layout))
    if saved is None or not allow_batch_size_change:
        return layout, read_state(state, run.spec(layout))  # refuses a changed global_batch_size
    spec = {**run.spec(layout), "global_batch_size": state["spec"]["global_batch_size"]}
    cursor = read_state(state, spec)  # every other field must still match
    P = cursor.position
    b = saved.batch_at(P)
    offset = P - saved.start(b)
    if offset and run.reel.at_end(cursor):  # a pass that ended inside global batch b: nothing is left of it
        b, offset = b + 1, 0
    if offset:
        raise TopologyError(
            f"allow_batch_size_change=True: the state's cursor {P} is {offset} samples into global batch {b} "
            f"(of {saved.size(b)}) of the saved schedule {saved.describe()}; the global batch size can change only "
            f"between global batches, or that batch would hold samples of two sizes. Restore a checkpoint "
            f"saved at a global-batch boundary (after an optimizer step), or finish the batch with the saved "
            f"global_batch_size first"
        )
    schedule = layout.schedule.anchored(b, P)
    log.info(
        "global batch size changed at global batch %d (reel position %d): saved %s, now %s",
        b,
        P,
        saved.describe(),
        schedule.describe(),
    )
    return layout.with_schedule(schedule), cursor
