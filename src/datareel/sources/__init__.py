"""Sources: random-access readers of raw samples (layer 1 of the design).

The format readers (:class:`JsonlSource`, :class:`WebDatasetSource`) live in :mod:`datareel.formats`, which
imports :mod:`.base` from here; they are re-exported lazily (PEP 562), so importing a format's reader first
never runs this package's ``__init__`` back into the half-imported reader.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Source
from .sequence import SequenceSource, from_sequence

_LAZY = {"JsonlSource": "..formats.jsonl.reader", "WebDatasetSource": "..formats.webdataset.reader"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'datareel.sources' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = ["JsonlSource", "Source", "SequenceSource", "WebDatasetSource", "from_sequence"]
