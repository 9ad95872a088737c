"""Pure order math: permutations, epochs, the reel, the batch layout. No I/O here."""

from .layout import Layout
from .permute import permute
from .nodes import ReelPlan

__all__ = ["Layout", "ReelPlan", "permute"]
