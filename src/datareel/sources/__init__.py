"""Sources: random-access readers of raw samples (layer 1 of the design)."""

from .base import Source
from .jsonl import JsonlSource
from .sequence import SequenceSource, from_sequence
from .webdataset import WebDatasetSource

__all__ = ["JsonlSource", "Source", "SequenceSource", "WebDatasetSource", "from_sequence"]
