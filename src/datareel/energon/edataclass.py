"""Energon's ``megatron.energon.edataclass``: the ``@edataclass`` decorator of sample types."""

from ..sources.typed import edataclass

__all__ = ["edataclass"]
