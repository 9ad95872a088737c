"""The cursor's JSON in a state: ``cursor`` (positions, or packs, consumed by all ranks together) and, in a
packed reel or a windowed stage, ``pack = [window, offset]``, both ways.

:func:`cursor_from_json` checks both before a :class:`~datareel.reel.cursor.Cursor` is built (a damaged one
is a :class:`~datareel.errors.StateDamagedError` naming it); whether ``pack`` belongs to the spec (it does
exactly when the spec packs or has a windowed stage) is checked with the whole state
(:func:`datareel.state.check_state`).
"""

from __future__ import annotations

from typing import Any

from ..errors import INT64_LIMIT, StateDamagedError
from ..reel.cursor import Cursor


def cursor_to_json(cursor: Cursor) -> dict[str, Any]:
    """The state's ``cursor`` (and, packed, ``pack``) entries."""
    out: dict[str, Any] = {"cursor": int(cursor.position)}
    if cursor.pack is not None:
        out["pack"] = [int(cursor.pack[0]), int(cursor.pack[1])]
    return out


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_LIMIT


def cursor_from_json(state: dict[str, Any]) -> Cursor:
    """The :class:`~datareel.reel.cursor.Cursor` a state's ``cursor`` and ``pack`` name; a
    :class:`~datareel.errors.StateDamagedError` naming the one that is not of its type."""
    position: Any = state.get("cursor")
    if not _is_count(position):
        raise StateDamagedError(f"state cursor={position!r} must be an integer in [0, 2^63 - 1]; the state is damaged")
    if "pack" not in state:
        return Cursor(position)
    pack = state["pack"]
    if not (isinstance(pack, list | tuple) and len(pack) == 2 and all(_is_count(v) for v in pack)):
        raise StateDamagedError(
            f"state pack={pack!r} must be [window, offset] (two integers >= 0); the state is damaged"
        )
    return Cursor(position, (pack[0], pack[1]))
