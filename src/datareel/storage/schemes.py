"""The URL scheme of a path (``s3`` of ``s3://bucket/key``): what :mod:`.registry` picks a store by and what a
store asks of the URLs it is given (:mod:`.remote` tells ``s3://`` from ``msc://``)."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(path: object) -> str | None:
    """The URL scheme of ``path`` in lower case (``"s3"``), or ``None`` for a local path."""
    if not isinstance(path, str):
        return None
    match = _SCHEME.match(path)
    return match[1].lower() if match else None
