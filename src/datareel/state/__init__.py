"""The loader state: a cursor into the reel plus the fingerprint of the spec it belongs to.

Format, version 1 (JSON-serialisable, the same on every rank, a few hundred bytes)::

    {"format": "datareel.loader",          # always this string
     "version": 1,                         # the layout of this dict
     "cursor": P,                          # positions (packs, with packing) consumed by all ranks together
     "spec": {
        "seed": int, "shuffle": bool,
        "global_batch_size": int | schedule,  # int: constant; else {"ramp_up": [start, increment, samples, final]}
                                              # or {"pieces": [[from_batch, G], ...]}, wrapped as
                                              # {"from": [batch, position], "rule": ...} after a change
                                              # (see datareel.plan.schedule)
        "dataset": {"name": str,           # the dataset's name, cut to 80 characters
                    "size": int | null,    # samples (one pass; null: an endless weighted mix)
                    "digest": str,         # 16 hex digits over the whole dataset tree's description
                    "sources": [[name, weight | repetitions | null, 6-hex digest], ...],  # blends, if short
                    "content": str},       # with from_sequence sources only: 16 hex digits over sampled items
        "packing": {"max_length": int, "window": int, "over_length": str,            # with packing only
                    "length": "index" | "bytes" | {"function": qualname, "module": str, "lengths": 16-hex digest}},
        "stage": {"window": int, "pack": bool, "encoder": "module.Class" | null}},   # a windowed stage only
     "pack": [window, offset],             # with packing only: the input window of the next pack, and its number
     "check": str}                         # 16 hex digits binding cursor, pack and spec (see below)

The spec records everything that, if changed, would make the cursor point into
another reel or cut other global batches (invariant I6); every field is quoted
with what it protects (:data:`GUARANTEES`) when a restore is refused.  The key
order above is the order written; ``tests/data/golden_states*.json`` pin the bytes.
:class:`Spec` is the spec as a schema: its fields (:mod:`.fields`: type, bounds and
guarantee of each), ``to_json`` / ``from_json`` and ``diff``.

``check`` is a digest of ``cursor``, ``pack`` and ``spec`` together.  A packed
state's ``(window, offset)`` cannot be checked against its ``cursor`` without
planning every window before it (restores stay O(1)), so a state spliced from
two checkpoints, or hand-edited, would silently re-serve or skip packs; the
digest refuses it instead.  States written before the field existed (datareel
0.1.0) have no ``check`` and are read as before; older readers ignore it.

A state comes from a file, so it is checked before anything in it is used (:func:`check_state`): a tree
of JSON values (dicts with string keys, lists, strings, numbers, booleans, null) at most
:data:`MAX_DEPTH` deep, of at most :data:`MAX_NODES` values, strings of at most :data:`MAX_STRING`
characters, integers below ``2^64`` and finite floats; the top-level keys above and no others; each
field of the spec this datareel reads of the type documented above; then its ``check``.  Only then are
its schedule resolved or its fields compared, and every malformed state is a
:class:`~datareel.errors.StateError` naming the field (:mod:`.document` lists which kind when).  The walk
is iterative and stops at the first value past a bound.

The modules, one job each: :mod:`.values` (the bounds of JSON values; their read-only form),
:mod:`.fields` (each spec field's check and guarantee), :mod:`.spec` (:class:`Spec`), :mod:`.upgrade`
(older releases' fields), :mod:`.cursor` (the cursor's JSON), :mod:`.document` (the state document:
:func:`make_state`, :func:`check_state`, :func:`read_state`).  Every name is importable from here.
"""

from __future__ import annotations

from .cursor import cursor_from_json, cursor_to_json
from .document import (
    FORMAT,
    KEYS,
    VERSION,
    _check_binding,
    check_state,
    looks_like_energon,
    make_state,
    read_spec,
    read_state,
    state_check,
)
from .fields import FIELDS, GUARANTEES, Field, check_fields, expect, protects
from .spec import Difference, Spec, dataset_changes, mismatch
from .upgrade import _upgrade_content, log, upgrade, upgrade_json
from .values import MAX_DEPTH, MAX_NODES, MAX_STRING, check_bounds, freeze, thaw

# The names of the single-module state.py, kept for code that imported them.
_check_bounds = check_bounds
_check_spec = check_fields
_expect = expect
_looks_like_energon = looks_like_energon
_upgrade = upgrade_json

__all__ = [
    "FIELDS",
    "FORMAT",
    "GUARANTEES",
    "KEYS",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_STRING",
    "VERSION",
    "Difference",
    "Field",
    "Spec",
    "check_bounds",
    "check_fields",
    "check_state",
    "cursor_from_json",
    "cursor_to_json",
    "dataset_changes",
    "expect",
    "freeze",
    "looks_like_energon",
    "make_state",
    "mismatch",
    "protects",
    "read_spec",
    "read_state",
    "state_check",
    "thaw",
    "upgrade",
    "upgrade_json",
    "_check_binding",
    "_upgrade_content",
    "log",
]
