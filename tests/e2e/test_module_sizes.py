"""No module of src/datareel is over 300 lines: a module that grows past it is split by responsibility (a mixin or a
module of its own with one job), as docs/architecture.md describes the layout."""

from __future__ import annotations

from pathlib import Path

import datareel

LIMIT = 300


def test_no_module_is_over_300_lines():
    src = Path(datareel.__file__).resolve().parent
    long = {
        str(path.relative_to(src)): n
        for path in sorted(src.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert long == {}, f"modules over {LIMIT} lines (split them by responsibility): {long}"
