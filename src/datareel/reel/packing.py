"""``datareel.Packing``: the options of length-planned packing (pass to ``Loader(packing=...)``).

Kept as an import path: the options live beside their planner in :mod:`.packed`.
"""

from __future__ import annotations

from .packed import Packing

__all__ = ["Packing"]
