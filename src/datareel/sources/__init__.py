"""Sources: random-access readers of raw samples (layer 1 of the design)."""

from .base import Source
from .sequence import SequenceSource, from_sequence

__all__ = ["Source", "SequenceSource", "from_sequence"]
