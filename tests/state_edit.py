"""Edit a saved loader state on purpose (tests that jump to a cursor), keeping its ``check`` valid.

A state's ``check`` binds its cursor, pack and spec, so an edited state is refused unless the
digest is written again, which is what a test that means the edit does here.
"""

from __future__ import annotations

from typing import Any

from datareel.state import state_check


def edited(state: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``state`` with ``fields`` replaced and its ``check`` recomputed."""
    out = {key: value for key, value in state.items() if key != "check"}
    out.update(fields)
    return {**out, "check": state_check(out)}
