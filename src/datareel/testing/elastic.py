"""The restore-everywhere checker: save at every step, restore on another topology, compare the rest.

Every datareel test of ordering, mixing, packing, state or layout goes through
:func:`check_restore_everywhere`, and users can run it on their own datasets and
task encoders.  It

1. runs an uninterrupted single-rank reference over the window of interest;
2. runs topology ``before`` in lockstep over the same window, checking its
   global batches against the reference and saving the state after *every*
   micro-step (all ranks must give the identical state);
3. restores each saved state into topology ``after`` and checks that the rest of
   the run equals the reference's, global batch by global batch.  A state the
   ``after`` layout cannot split must be refused with ``TopologyError`` instead.
   These restores run in this process (``after`` with ``num_workers=0``, one set
   of loaders reused): a batch is a pure function of its descriptor, so worker
   processes only decide who computes it, and restoring every step through a
   worker pool would cost the square of the steps in worker round trips;
4. where ``after`` has workers, restores its real worker processes (one set of
   loaders, so they start once) at the first and at the last restorable state
   and checks that they continue with the same global batches: the one linear
   check that N workers give what 0 workers give, a restore into a loader whose
   persistent workers already ran included;
5. round-trips every state: it survives ``json.dumps``/``json.loads`` and a
   restored loader reports exactly the state it was given.

A failed check raises :class:`AssertionError` with what differed (explicitly,
so it also holds under ``python -O``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, TopologyError
from ..loader import Loader
from ..plan.schedule import BatchSchedule
from ..reel.cursor import Cursor
from ..state import make_state
from .simulate import make_ranks, take_micro_step


def expect(condition: bool, message: str) -> None:
    """An assertion that ``python -O`` keeps."""
    if not condition:
        raise AssertionError(message)


@dataclass(frozen=True)
class Topology:
    """One topology: data-parallel ``world_size``, DataLoader ``num_workers`` per rank, ``micro_batch_size``."""

    world_size: int
    num_workers: int
    micro_batch_size: int

    def loaders(self, dataset: Any, **common: Any) -> list[Loader]:
        extra = {"persistent_workers": True} if self.num_workers else {}
        return make_ranks(
            dataset,
            world_size=self.world_size,
            num_workers=self.num_workers,
            micro_batch_size=self.micro_batch_size,
            **extra,
            **common,
        )


def _fast_forward(loaders: list[Loader], cursor: int) -> None:
    """Put loaders at ``cursor`` as if they had consumed it (a plain reel's state is nothing but the cursor)."""
    state = loaders[0].state_dict()
    if cursor and "pack" in state:
        raise OptionError(f"start={cursor}: a packed reel's window checks start at 0 (its cursor holds a pack offset)")
    # a fresh state at ``cursor``, its ``check`` written for it
    state = make_state(Cursor(cursor, loaders[0].reel.start().pack), state["spec"])
    for loader in loaders:
        loader.load_state_dict(state)


def _steps(
    loaders: list[Loader], iterators: list, stop: int | None, schedule: BatchSchedule
) -> list[tuple[list[Any], str]]:
    """Consume micro-steps in lockstep until the cursor reaches ``stop`` (or a finite reel ends), checking
    that each lies inside one global batch of ``schedule`` and that ``at_global_batch_boundary`` is true
    exactly after a global batch's last micro-step (or the end of a pass).

    -> per micro-step: (records of all ranks in rank order, the state saved after it)
    """
    out = []
    while stop is None or loaders[0].cursor < stop:
        records = take_micro_step(iterators)
        if records is None:
            break
        positions = [record["__positions__"] for record in records]
        batches = {schedule.batch_at(p) for p in positions}
        expect(len(batches) == 1, f"the micro-step of positions {positions} spans global batches {sorted(batches)}")
        closes = max(positions) + 1 == schedule.start(batches.pop() + 1)
        ended = loaders[0].reel.at_end(loaders[0].reel_cursor)
        flag = loaders[0].at_global_batch_boundary
        expect(
            flag == (closes or ended),
            f"after the micro-step of positions {positions}: at_global_batch_boundary={flag}, but it "
            f"{'closes' if closes else 'does not close'} its global batch (end of pass: {ended})",
        )
        states = {json.dumps(loader.state_dict(), sort_keys=True) for loader in loaders}
        expect(len(states) == 1, f"ranks disagree on the state after a micro-step: {states}")
        out.append((records, states.pop()))
    return out


def by_global_batch(records: list[dict], G: int | BatchSchedule) -> dict[int, list[dict]]:
    """Group sample records by global batch (``position // G``, or the schedule's batch), keeping order."""
    schedule = BatchSchedule.of(G)
    groups: dict[int, list[dict]] = {}
    for record in records:
        groups.setdefault(schedule.batch_at(record["__positions__"]), []).append(record)
    return groups


def splits(schedule: BatchSchedule, cursor: int, step_size: int) -> bool:
    """Whether micro-steps of ``step_size`` can continue from ``cursor``: the rest of its global batch and
    every global batch after it are whole micro-steps (the rule a restore must follow)."""
    b = schedule.batch_at(cursor)
    if (cursor - schedule.start(b)) % step_size:
        return False
    return all(size % step_size == 0 for _, size in schedule.sizes_from(b))


def _continue_identically(
    loaders: list[Loader],
    state: dict[str, Any],
    expected: list[Any],
    stop: int,
    G: BatchSchedule,
    where: str,
    loaded: bool = False,
) -> None:
    """Check that ``loaders`` (one topology's ranks), restored from ``state`` (here, unless ``loaded``), report
    it back and continue with ``expected``, global batch by global batch, up to ``stop``."""
    for loader in [] if loaded else loaders:
        loader.load_state_dict(state)
    for loader in loaders:
        again = json.dumps(loader.state_dict(), sort_keys=True)
        expect(again == json.dumps(state, sort_keys=True), f"restored {state}, but the loader reports {again}")
    rest = [r for records, _ in _steps(loaders, [iter(loader) for loader in loaders], stop, G) for r in records]
    expect(
        by_global_batch(rest, G) == by_global_batch(expected, G),
        f"restore at cursor {state['cursor']} on {where} differs from the uninterrupted run",
    )


def check_restore_everywhere(
    dataset: Any,
    *,
    global_batch_size: int | Any,
    before: Topology,
    after: Topology,
    start: int = 0,
    global_batches: int = 4,
    seed: int = 0,
    **common: Any,
) -> dict[str, int]:
    """Assert elastic restore from every micro-step of ``before`` into ``after``.

    ``global_batch_size`` may be a schedule (:class:`~datareel.RampUp`, pieces).  ``start`` (a
    global-batch boundary) begins the window deeper in the reel, e.g. just before an epoch boundary.
    Returns counts for reporting.
    """
    G = BatchSchedule.of(global_batch_size)
    first_batch = G.batch_at(start)
    if G.start(first_batch) != start:
        raise OptionError(f"start={start} must be a global-batch boundary of global_batch_size={global_batch_size}")
    stop = G.start(first_batch + global_batches)
    common = dict(global_batch_size=G, seed=seed, **common)

    single = G.common_divisor(first_batch)  # the reference's micro-batch: whole steps in every batch
    reference_loader = Loader(dataset, micro_batch_size=G.constant or single, **common)
    _fast_forward([reference_loader], start)
    reference = [r for records, _ in _steps([reference_loader], [iter(reference_loader)], stop, G) for r in records]
    positions = [r["__positions__"] for r in reference]
    expect(positions == list(range(start, start + len(reference))), f"the reference skipped positions: {positions}")
    end = start + len(reference)  # < stop only for a finite reel

    first = before.loaders(dataset, **common)
    _fast_forward(first, start)
    steps = _steps(first, [iter(loader) for loader in first], stop, G)
    consumed = [r for records, _ in steps for r in records]
    expect(consumed == reference, f"the uninterrupted run on {before} differs from the single-rank reference")

    in_process = Topology(after.world_size, 0, after.micro_batch_size)
    second = in_process.loaders(dataset, **common)
    restored = refused = 0
    restorable: list[dict[str, Any]] = []
    for _records, state_json in steps:
        state = json.loads(state_json)
        cursor = state["cursor"]
        try:
            for loader in second:
                loader.load_state_dict(state)
        except TopologyError:
            S = after.micro_batch_size * after.world_size
            expect(not splits(G, cursor, S), f"a state at cursor {cursor} was refused although {S} splits the rest")
            expect(cursor != end or end == stop, f"the state at the end of the pass ({cursor}) was refused")
            refused += 1
            continue
        expect(
            splits(G, cursor, after.micro_batch_size * after.world_size)
            or second[0].reel.at_end(second[0].reel_cursor),
            f"a state at cursor "
            f"{cursor} was restored on {after} although m W cannot split the global batches from there",
        )
        _continue_identically(second, state, reference[cursor - start :], stop, G, f"{after}", loaded=True)
        restorable.append(state)
        restored += 1
    # N workers give what 0 workers give: the real worker processes continue from the first and the last
    # restorable state (the second restore goes into loaders whose persistent workers already ran)
    workers = after.loaders(dataset, **common) if after.num_workers and restorable else []
    for state in restorable[:1] + restorable[1:][-1:] if workers else []:
        where = f"{after} (its worker processes)"
        _continue_identically(workers, state, reference[state["cursor"] - start :], stop, G, where)
    for loader in first + second + workers:
        loader.close()
    return {"restored": restored, "refused": refused, "steps": len(steps), "end": end}
