"""Sources: random-access readers of raw samples (layer 1 of the design).

The format readers (:class:`JsonlSource`, :class:`WebDatasetSource`) live in :mod:`datareel.formats`, which
imports :mod:`.base` from here; they are re-exported lazily (PEP 562), so importing a format's reader first
never runs this package's ``__init__`` back into the half-imported reader.
"""

from __future__ import annotations

from ..lazy import lazy_names
from .base import Source
from .sequence import SequenceSource, from_sequence

_LAZY = {"JsonlSource": "..formats.jsonl.reader", "WebDatasetSource": "..formats.webdataset.reader"}


__getattr__ = lazy_names(__name__, globals(), _LAZY)[0]


__all__ = ["JsonlSource", "Source", "SequenceSource", "WebDatasetSource", "from_sequence"]
