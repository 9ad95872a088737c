"""Energon's ``megatron.energon.errors``: ``SkipSample`` and the error handlers users pass
(``log_exception``, ``reraise_exception``)."""

from ..errors import SkipSample
from .task_encoder.base import log_exception, reraise_exception

__all__ = ["SkipSample", "log_exception", "reraise_exception"]
