"""The state of a batch-granular blend's loader (``BlendDataset`` / ``MixBatchDataset``): written, read and
checked here, in one place.

Format (version 1), keys in this order::

    {"format": "datareel.energon.batch_blend", "version": 1,
     "unit": u,                                   # units begun on every rank (a unit: one global batch of a child)
     "spec": {"kind": "BlendDataset" | "MixBatchDataset", "seed": int, "weights": [float, ...],
              "block": K, "batch_size": int | null},            # batch_size: MixBatchDataset's slots per batch
     "children": [state, ...]}                    # each child loader's own datareel state (docs/guarantees.md)

Every field is rank-independent, so the state is the same dict on every rank.  A child's state is checked by its
own loader (its spec, its global batch size, the topology it restores on); what the blend checks is its own spec
and that the children's positions follow from ``unit``: child ``c`` has begun exactly
:func:`~datareel.plan.batch_blend.taken` ``(seed, weights, c, u)`` global batches (:func:`check_positions`).
"""

from __future__ import annotations

from typing import Any

from ..errors import ForeignStateError, StateDamagedError, StateMismatchError, StateVersionError
from ..plan.batch_blend import block_size, taken
from .batch_blend_spec import BatchBlendSpec

FORMAT = "datareel.energon.batch_blend"
VERSION = 1
_KEYS = ("format", "version", "unit", "spec", "children")
_UNIT_LIMIT = 1 << 63


def spec_fields(blend: BatchBlendSpec) -> dict[str, Any]:
    """What a state must agree with: the blend's kind, seed, weights, block and batch size."""
    return {
        "kind": blend.kind,
        "seed": blend.seed,
        "weights": [float(w) for w in blend.weights],
        "block": block_size(blend.weights),
        "batch_size": blend.batch_size,
    }


def write_state(blend: BatchBlendSpec, unit: int, children: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "unit": int(unit), "spec": spec_fields(blend), "children": children}


def read_state(state: Any, blend: BatchBlendSpec, where: str) -> tuple[int, list[Any]]:
    """-> (unit, the children's states) of ``state``, refused by name when it is not this blend's."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        if isinstance(state, dict) and state.get("format") == "datareel.loader":
            raise ForeignStateError(
                f"{where}: this is the state of a loader over one dataset (format 'datareel.loader'), not of a "
                f"{blend.kind}'s loader ('{FORMAT}'); restore it into the loader that saved it"
            )
        raise ForeignStateError(
            f"{where}: a {blend.kind}'s loader restores the dict its save_state_rank() returned (format "
            f"'{FORMAT}'), got {type(state).__name__}"
            + (f" of format {state.get('format')!r}" if isinstance(state, dict) else "")
        )
    version = state.get("version")
    if version != VERSION:
        raise StateVersionError(
            f"{where}: the state is of version {version!r}; this release reads version {VERSION} of '{FORMAT}'",
            {"version": (version, VERSION)},
        )
    if set(state) != set(_KEYS):
        extra, missing = sorted(set(state) - set(_KEYS)), sorted(set(_KEYS) - set(state))
        raise StateDamagedError(f"{where}: the state's keys are wrong (unknown {extra}, missing {missing})")
    unit = state["unit"]
    if isinstance(unit, bool) or not isinstance(unit, int) or not 0 <= unit < _UNIT_LIMIT:
        raise StateDamagedError(f"{where}: the state's unit={unit!r} must be an integer in [0, 2**63)")
    ours = spec_fields(blend)
    saved = state["spec"]
    if not isinstance(saved, dict):
        raise StateDamagedError(f"{where}: the state's spec is a {type(saved).__name__}, not a dict")
    differences = {k: (saved.get(k), v) for k, v in ours.items() if saved.get(k) != v}
    differences.update({k: (saved[k], None) for k in saved if k not in ours})
    if differences:
        listed = "; ".join(f"{k}: saved {s!r}, this loader {c!r}" for k, (s, c) in differences.items())
        raise StateMismatchError(
            f"{where}: the state was saved by another blend ({listed}); build the {blend.kind} with the same "
            f"datasets, weights, batch size and WorkerConfig.seed_offset as the run that saved it",
            differences,
        )
    children = state["children"]
    if not isinstance(children, list) or len(children) != len(blend.datasets):
        count = len(children) if isinstance(children, list) else type(children).__name__
        raise StateDamagedError(
            f"{where}: the state holds {count} children's states; this {blend.kind} has {len(blend.datasets)}"
        )
    return unit, children


def check_positions(blend: BatchBlendSpec, unit: int, begun: list[int], where: str) -> None:
    """Child ``c`` must have begun ``taken(seed, weights, c, unit)`` global batches (``begun[c]``: its loader's
    ``global_batch``); else the children's states were not saved with this ``unit`` (a spliced or edited state)."""
    wrong = [
        f"dataset {c} is at global batch {have}, where unit {unit} puts it at {want}"
        for c, have in enumerate(begun)
        if have != (want := taken(blend.seed, blend.weights, c, unit))
    ]
    if wrong:
        raise StateDamagedError(
            f"{where}: the children's states do not belong to this unit ({'; '.join(wrong)}); the state was edited "
            f"or put together from several checkpoints: restore a state as save_state_rank() returned it"
        )


def check_agreement(states: list[Any], where: str) -> None:
    """Raise on every rank unless all gathered states are present and the same (``states`` in rank order)."""
    missing = [r for r, s in enumerate(states) if s is None]
    if missing:
        raise ForeignStateError(f"{where}: ranks {missing} passed no state; every rank must pass the saved state")
    odd = [r for r, s in enumerate(states) if s != states[0]]
    if odd:
        units = {r: s.get("unit") if isinstance(s, dict) else None for r, s in enumerate(states)}
        raise StateMismatchError(
            f"{where}: ranks {odd} hold a state that differs from rank 0's (units by rank: {units}); every rank must "
            f"take the same number of batches from the blend, and build it with the same datasets and weights"
        )
