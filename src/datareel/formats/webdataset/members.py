"""One sample's tar members grouped into its key and parts, refusing what a changed or hand-made shard
may hold: two keys in one sample's range, a part twice, no files."""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import DatasetError
from .tarparse import split_name


def group(
    members: Iterable[tuple[str, int, int]], data: bytes | memoryview, shift: int, place: tuple[str, int, int, int]
) -> tuple[str, dict[str, bytes]]:
    """``(key, {part: bytes})`` of one sample's members (``(name, data offset, size)``; ``offset - shift``
    indexes ``data``). ``place`` = ``(where, sample, start, stop)`` names the sample in the errors: two keys,
    a part twice, or no files (:class:`DatasetError`)."""
    where, local, start, stop = place
    key: str | None = None
    parts: dict[str, bytes] = {}
    for name, offset, size in members:
        split = split_name(name)
        if split is None:
            continue
        if key is None:
            key = split[0]
        elif split[0] != key:
            raise DatasetError(
                f"{where}: sample {local} (bytes {start}-{stop}) holds keys {key!r} and {split[0]!r}; "
                f"the shard changed since it was indexed: re-run `datareel prepare`"
            )
        if split[1] in parts:
            raise DatasetError(
                f"{where}: sample {local} ({key!r}) holds part {split[1]!r} twice; remove the duplicate member "
                f"(datareel prepare refuses such shards)"
            )
        parts[split[1]] = bytes(data[offset - shift : offset - shift + size])
    if key is None:
        raise DatasetError(f"{where}: sample {local} (bytes {start}-{stop}) holds no files")
    return key, parts
