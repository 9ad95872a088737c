"""Energon's ``megatron.energon.loader``: ``get_loader`` and ``get_savable_loader`` (made in :mod:`.datasets`), and
the loader they return (:class:`~.energon_loader.EnergonLoader`)."""

from __future__ import annotations

from .datasets import get_loader, get_savable_loader
from .energon_loader import EnergonLoader

__all__ = ["EnergonLoader", "get_loader", "get_savable_loader"]
