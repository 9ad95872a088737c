"""Energon's ``megatron.energon.epathlib``: :class:`EPath`, local and remote paths on datareel's storage."""

from .epath import DEFAULT_PROFILE_NAME, EPath

__all__ = ["DEFAULT_PROFILE_NAME", "EPath"]
