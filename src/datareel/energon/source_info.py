"""Energon's ``megatron.energon.source_info``: :class:`SourceInfo` (one entry of a sample's ``__sources__``),
``add_source_info`` and ``get_source_info`` (datareel's own: :mod:`datareel.sources.source_info`)."""

from ..sources.source_info import SourceInfo, add_source_info, get_source_info

__all__ = ["SourceInfo", "add_source_info", "get_source_info"]
