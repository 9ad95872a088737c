"""Keys of the mappings datasets describe themselves with (``dataset.yaml``, ``.info.json``, split files,
metadatasets): :func:`check_keys` refuses an unknown one naming the closest allowed key, and one Energon reads but
datareel cannot honour by name and reason; :func:`_short` cuts a hostile value's ``repr`` for a message."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import DatasetError


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a hostile value may be huge, an int past the conversion limit)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"<an integer of {value.bit_length():,} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_keys(
    mapping: dict[str, Any],
    allowed: Iterable[str],
    where: str,
    what: str,
    refused: dict[str, str] | None = None,
    suggest: Iterable[str] = (),
) -> None:
    """Refuse a key of ``mapping`` (at ``where``: the file and the place in it) that is not ``allowed``:
    one in ``refused`` (a key Energon reads but datareel cannot honour: ``key -> why``) by name and
    reason, any other as unknown, with the allowed keys and the closest one of them or of ``suggest``
    (keys valid elsewhere, refused there by name) — a typo is never ignored."""
    import difflib

    allowed = sorted(allowed)
    refused = refused or {}
    for key in mapping:
        if key in allowed:
            continue
        if key in refused:
            raise DatasetError(f"{where}: {key!r}: {refused[key]}")
        close = difflib.get_close_matches(str(key), allowed + sorted(set(suggest) - set(allowed)), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DatasetError(
            f"{where} has an unknown key {_short(key)}{hint}; {what} takes {', '.join(allowed)}. "
            f"Fix or remove it: datareel refuses a key it does not know rather than ignore it"
        )
