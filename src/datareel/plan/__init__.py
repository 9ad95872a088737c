"""Pure order math: permutations, epochs, the reel, the batch layout. No I/O here."""

from .layout import Layout
from .nodes import ReelPlan
from .permute import permute

__all__ = ["Layout", "ReelPlan", "permute"]
