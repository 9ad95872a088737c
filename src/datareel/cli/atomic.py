"""Writing into a local directory safely now lives in :mod:`datareel.storage.atomic`; the old names are here too."""

from __future__ import annotations

import os as os  # tests patch os.replace through this module, as before

from ..storage.atomic import _exchange as _exchange
from ..storage.atomic import leftover, locked, swap_in

__all__ = ["leftover", "locked", "swap_in"]
