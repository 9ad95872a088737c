"""Energon's task-encoder toolkit on datareel; the module paths mirror ``megatron.energon.task_encoder``
(``.base``: encoders, ``Batch``, ``stateless``, batching helpers; ``.cooking``: cookers), so imports
from either path switch by replacing ``megatron.energon`` with ``datareel.energon``."""

from .base import (
    AugmentTaskEncoder,
    Batch,
    DefaultTaskEncoder,
    TaskEncoder,
    batch_list,
    batch_pad_stack,
    batch_stack,
    generic_batch,
    get_stateless,
    log_exception,
    reraise_exception,
    stateless,
)
from .cooking import Cooker, basic_sample_keys, cooker

__all__ = [
    "AugmentTaskEncoder",
    "Batch",
    "Cooker",
    "DefaultTaskEncoder",
    "TaskEncoder",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "cooker",
    "generic_batch",
    "get_stateless",
    "log_exception",
    "reraise_exception",
    "stateless",
]
