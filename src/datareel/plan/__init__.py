"""Pure order math: permutations, epochs, the reel, the batch layout. No I/O here."""

from .layout import Layout
from .permute import permute
from .reel import ReelPlan

__all__ = ["Layout", "ReelPlan", "permute"]
