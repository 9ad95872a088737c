"""The JSONL reader now lives in :mod:`datareel.formats.jsonl` (:mod:`~datareel.formats.jsonl.reader`); the old names
are importable here too."""

from __future__ import annotations

from ..formats.jsonl.reader import JsonlSource as JsonlSource
from ..formats.jsonl.reader import parse_json as parse_json
from ..formats.jsonl.reader import unparsable as unparsable

__all__ = ["JsonlSource", "parse_json", "unparsable"]
