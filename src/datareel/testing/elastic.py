"""The shared checkpoint helper: save at every step, restore on another topology, compare the rest.

Every test of ordering, mixing, packing, state or layout goes through
:func:`check_restore_everywhere`.  It

1. runs an uninterrupted single-rank reference over the window of interest;
2. runs topology ``before`` in lockstep over the same window, checking its
   global batches against the reference and saving the state after *every*
   micro-step (all ranks must give the identical state);
3. restores each saved state into topology ``after`` (one set of loaders,
   reused, so worker processes start once) and checks that the rest of the run
   equals the reference's, global batch by global batch.  A state the ``after``
   layout cannot split must be refused with ``TopologyError`` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import TopologyError
from ..loader import Loader
from .simulate import make_ranks, take_micro_step


@dataclass(frozen=True)
class Topology:
    world_size: int
    num_workers: int
    micro_batch_size: int

    def loaders(self, dataset: Any, **common: Any) -> list[Loader]:
        extra = {"persistent_workers": True} if self.num_workers else {}
        return make_ranks(dataset, world_size=self.world_size, num_workers=self.num_workers,
                          micro_batch_size=self.micro_batch_size, **extra, **common)


def _fast_forward(loaders: list[Loader], cursor: int) -> None:
    """Put loaders at ``cursor`` as if they had consumed it (a state is nothing but the cursor)."""
    state = loaders[0].state_dict()
    state["cursor"] = cursor
    for loader in loaders:
        loader.load_state_dict(state)


def _steps(loaders: list[Loader], iterators: list, stop: int | None) -> list[tuple[list[Any], str]]:
    """Consume micro-steps in lockstep until the cursor reaches ``stop`` (or a finite reel ends).

    -> per micro-step: (records of all ranks in rank order, the state saved after it)
    """
    out = []
    while stop is None or loaders[0].cursor < stop:
        records = take_micro_step(iterators)
        if records is None:
            break
        states = {json.dumps(loader.state_dict(), sort_keys=True) for loader in loaders}
        assert len(states) == 1, f"ranks disagree on the state after a micro-step: {states}"
        out.append((records, states.pop()))
    return out


def by_global_batch(records: list[dict], G: int) -> dict[int, list[dict]]:
    """Group sample records by global batch (position // G), keeping order."""
    groups: dict[int, list[dict]] = {}
    for record in records:
        groups.setdefault(record["__positions__"] // G, []).append(record)
    return groups


def check_restore_everywhere(
    dataset: Any,
    *,
    global_batch_size: int,
    before: Topology,
    after: Topology,
    start: int = 0,
    global_batches: int = 4,
    seed: int = 0,
    **common: Any,
) -> dict[str, int]:
    """Assert elastic restore from every micro-step of ``before`` into ``after``.

    ``start`` (a multiple of the global batch size) begins the window deeper in
    the reel, e.g. just before an epoch boundary.  Returns counts for reporting.
    """
    G = global_batch_size
    assert start % G == 0
    stop = start + global_batches * G
    common = dict(global_batch_size=G, seed=seed, **common)

    reference_loader = Loader(dataset, micro_batch_size=G, **common)
    _fast_forward([reference_loader], start)
    reference = [r for records, _ in _steps([reference_loader], [iter(reference_loader)], stop) for r in records]
    assert [r["__positions__"] for r in reference] == list(range(start, start + len(reference)))
    end = start + len(reference)  # < stop only for a finite reel

    first = before.loaders(dataset, **common)
    _fast_forward(first, start)
    steps = _steps(first, [iter(loader) for loader in first], stop)
    consumed = [r for records, _ in steps for r in records]
    assert consumed == reference, "the uninterrupted run on `before` differs from the reference"

    second = after.loaders(dataset, **common)
    restored = refused = 0
    for _records, state_json in steps:
        state = json.loads(state_json)
        cursor = state["cursor"]
        try:
            for loader in second:
                loader.load_state_dict(state)
        except TopologyError:
            assert (cursor % G) % (after.micro_batch_size * after.world_size) != 0
            refused += 1
            continue
        rest = [r for records, _ in _steps(second, [iter(loader) for loader in second], stop) for r in records]
        expected = reference[cursor - start :]
        assert by_global_batch(rest, G) == by_global_batch(expected, G), (
            f"restore at cursor {cursor} on {after} differs from the uninterrupted run"
        )
        restored += 1
    for loader in first + second:
        loader.close()
    return {"restored": restored, "refused": refused, "steps": len(steps), "end": end}
