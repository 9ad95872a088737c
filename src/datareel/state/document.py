"""The state document: writing one (:func:`make_state`), checking one from a file (:func:`check_state`), and
reading its cursor against the loader's spec (:func:`read_state`).

The format is documented in :mod:`datareel.state`.  Every refusal is a :class:`~datareel.errors.StateError`:

- :class:`~datareel.errors.ForeignStateError` — not a datareel loader state (an Energon checkpoint, another
  object, another ``format``); :class:`~datareel.errors.StateVersionError` — another ``version``;
- :class:`~datareel.errors.StateDamagedError` — past a bound, an unknown key, a field of the wrong type;
  :class:`~datareel.errors.StateCheckError` — a ``check`` that does not match (edited or spliced);
- :class:`~datareel.errors.StateMismatchError` — a well-formed state of another spec, naming each field
  (:meth:`~datareel.state.spec.Spec.diff`).

``StateVersionError`` and ``StateCheckError`` are ``StateMismatchError`` s too, as they were before.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from typing import Any

from ..errors import (
    ForeignStateError,
    StateCheckError,
    StateDamagedError,
    StateMismatchError,
    StateVersionError,
    brief,
)
from ..reel.cursor import Cursor
from .cursor import cursor_from_json, cursor_to_json
from .fields import VERSION_PROTECTS, check_fields
from .spec import Spec, mismatch
from .upgrade import upgrade
from .values import check_bounds

log = logging.getLogger("datareel")
FORMAT = "datareel.loader"
VERSION = 1
KEYS = ("format", "version", "cursor", "spec", "pack", "check")
"""Every top-level key a state may have (``pack`` with packing or a windowed stage; ``check`` since 0.2)."""


def make_state(cursor: Cursor, spec: Spec | dict[str, Any]) -> dict[str, Any]:
    """The state of a loader at ``cursor`` on ``spec`` (a :class:`Spec`, or its JSON, written as given)."""
    fields = cursor_to_json(cursor)
    written = spec.to_json() if isinstance(spec, Spec) else spec
    state = {"format": FORMAT, "version": VERSION, "cursor": fields.pop("cursor"), "spec": written, **fields}
    return {**state, "check": state_check(state)}


def state_check(state: dict[str, Any]) -> str:
    """16 hex digits over a state's ``cursor``, ``pack`` and ``spec`` (JSON with sorted keys)."""
    bound = [state.get("cursor"), state.get("pack"), state.get("spec")]
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def check_state(state: Any, *, binding: bool = True) -> dict[str, Any]:
    """``state`` if it is a well-formed datareel state (see :mod:`datareel.state`): bounded, of the documented
    keys and types, and (``binding``) with a ``check`` that matches; else a
    :class:`~datareel.errors.StateError` naming the field (see the module doc). Nothing in the state is
    resolved or compared before the bounds are checked: the work is O(its size)."""
    if looks_like_energon(state):
        raise ForeignStateError(
            "this is a checkpoint written by Megatron-Energon's own loader, not by datareel: it records each "
            "worker's shuffle buffers and shard positions, which do not determine a position in one global "
            "sample order, so it cannot be converted. Start this run's data from the beginning (or from a "
            "datareel checkpoint); from then on datareel's checkpoints restore on any topology"
        )
    if not isinstance(state, dict):
        raise ForeignStateError(f"a datareel state is a dict (from loader.state_dict()), got {type(state).__name__}")
    if state.get("format") != FORMAT:
        keys = sorted(str(k)[:40] for k in itertools.islice(state, 64))[:8]
        raise ForeignStateError(
            f"this is not a datareel loader state (format={brief(state.get('format'))}, expected "
            f"{FORMAT!r}; keys {keys}); pass the dict returned by loader.state_dict()"
        )
    version = state.get("version")
    if type(version) is not int or version != VERSION:
        raise StateVersionError(
            f"state version {brief(version)} cannot be restored by this datareel (reads "
            f"version {VERSION}): {VERSION_PROTECTS}; restore it with the datareel release "
            f"that wrote it",
            {"version": (version, VERSION)},
        )
    check_bounds(state)
    unknown = [key for key in state if key not in KEYS]
    if unknown:
        raise StateDamagedError(
            f"state key {unknown[0]!r} is not one of a datareel state's keys {list(KEYS)}: the state was edited, "
            f"or written by another program; restore the state exactly as loader.state_dict() returned it"
        )
    cursor_from_json(state)
    if "check" in state and not isinstance(state["check"], str):
        raise StateDamagedError(
            f"state check={brief(state['check'])} must be a string of 16 hex digits; the state is damaged"
        )
    spec = state.get("spec")
    if not isinstance(spec, dict):
        raise StateDamagedError(f"state spec={brief(spec)} must be a dict; the state is damaged")
    if binding:
        _check_binding(state)
    check_fields(spec)
    packed = "packing" in spec or "stage" in spec
    if packed != ("pack" in state):
        raise StateDamagedError(
            f"state {'has no' if packed else 'has a'} pack=[window, offset] but its spec "
            f"{'packs' if packed else 'neither packs nor has a windowed stage'}: a packed (or windowed) state "
            f"has both, any other neither; the state is damaged"
        )
    return state


def read_spec(state: Any) -> Spec:
    """The :class:`Spec` of a saved state, checked with it (:func:`check_state`)."""
    return Spec.from_json(check_state(state)["spec"], check=False)


def read_state(state: Any, spec: Spec | dict[str, Any]) -> Cursor:
    """Check a saved state (:func:`check_state`) against the current ``spec`` and return its cursor.

    Raises :class:`~datareel.errors.StateMismatchError` naming every differing field
    (:meth:`Spec.diff`), after reading an older release's fields as today's (:func:`.upgrade.upgrade`); a
    windowed stage's task encoder class alone may differ at a window's start (:func:`encoder_changed`).
    """
    saved = read_spec(state)
    cursor = cursor_from_json(state)
    current = Spec.of(spec)
    differences = upgrade(saved, current).diff(current)
    if differences and not encoder_changed(differences, cursor):
        raise mismatch(differences)
    return cursor


def encoder_changed(differences: list[Any], cursor: Cursor) -> bool:
    """Whether the only difference is the windowed stage's task encoder class, at a window's start: nothing
    of that window was handed out, the windows before it were all handed out, and every window from it on is
    planned by the encoder now given, so every input is still served once.  Inside a window the outputs (or
    packs) already handed out were planned by the saved encoder, which the restoring one may plan otherwise:
    raises :class:`~datareel.errors.StateMismatchError` naming the window and the way out."""
    if len(differences) != 1 or differences[0][0] != "stage" or cursor.pack is None:
        return False
    _, old, new, _ = differences[0]
    if not isinstance(old, dict) or not isinstance(new, dict) or {**old, "encoder": 0} != {**new, "encoder": 0}:
        return False
    (w, o), then, now = cursor.pack, old.get("encoder"), new.get("encoder")
    if o:
        raise StateMismatchError(
            f"the state was saved by task encoder {then} inside window {w} of the windowed stage ({o} of that "
            f"window's outputs or packs handed out); {now} may plan that window otherwise (encode_sample, "
            f"select_samples_to_pack), which would re-serve or skip its samples. Another encoder class continues "
            f"a state saved at a window's start (pack=[w, 0]); restore this one with a class named {then}, or "
            f"start without restoring",
            {"stage": (old, new)},
        )
    log.info("state saved by task encoder %s continues with %s from window %d (its start)", then, now, w)
    return True


def _check_binding(state: dict[str, Any]) -> None:
    """Refuse a state whose ``cursor``, ``pack`` or ``spec`` changed after it was written (see ``check``)."""
    if "check" not in state:
        return  # written by datareel 0.1.0, before the field existed
    saved = state["check"]
    try:
        expected = state_check(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StateDamagedError(f"state spec cannot be read as JSON ({exc}); the state is damaged") from None
    if saved != expected:
        raise StateCheckError(
            f"state check={brief(saved)} does not match its cursor={state.get('cursor')!r}, "
            f"pack={brief(state.get('pack'))} "
            f"and spec (expected {expected!r}): the state was edited, or spliced from two checkpoints, after "
            f"the loader wrote it. Restoring it would re-serve or skip samples; restore the state exactly as "
            f"loader.state_dict() returned it",
            {"check": (saved, expected)},
        )


def looks_like_energon(state: Any) -> bool:
    """Energon's states: ``SavableDataLoaderState`` objects (or lists of them, or their dict form)."""
    items = state if isinstance(state, list | tuple) else [state]
    for item in items:
        if type(item).__module__.startswith("megatron.energon") or "SavableDataLoaderState" in type(item).__name__:
            return True
        if isinstance(item, dict) and ("worker_states" in item or "micro_batch_size" in item and "format" not in item):
            return True
    return False
