"""``@stateless(failure_tolerance=N)``: refused by name where a dataset is made, never accepted and dropped.

megatron.energon 7.4.1 wraps each hook of a task encoder (``encode_sample``, ``preencode_sample`` /
``postencode_sample``, ``batch``, ``encode_batch``, ``select_samples_to_pack`` / ``pack_selected_samples``, each
cooker's function) in a counter of *consecutive* failures handled by the worker config's error handler, per
worker process, and raises a ``FatalSampleError`` once it reaches the hook's ``failure_tolerance`` (its
``@stateless(failure_tolerance=)``, else the encoder's ``__default_failure_tolerance__``, 100; 0 turns it off).

datareel has no such counter, and no deterministic one to map it onto: a failing sample is handled by itself, at
its reel position (with an error handler it is substituted by a sample of the same source, the same on every
topology, and its micro-batch fails with a ``BatchError`` when 16 substitutes fail; without one the first
failure raises), and which samples one worker process sees in a row depends on the number of workers, so a
count of them would change a run's batches with the topology.  A hook marked with a tolerance, or an encoder
class whose ``__default_failure_tolerance__`` is not Energon's 100, is refused naming the hook and the fix.
"""

from __future__ import annotations

from typing import Any

from ...errors import OptionError

ENERGON_DEFAULT = 100
"""megatron.energon's ``TaskEncoder.__default_failure_tolerance__``."""

HOOKS = (
    "encode_sample",
    "preencode_sample",
    "postencode_sample",
    "batch",
    "encode_batch",
    "select_samples_to_pack",
    "pack_selected_samples",
)
"""The hooks megatron.energon counts failures of."""


def _tolerance(fn: Any) -> Any:
    return getattr(getattr(fn, "__func__", fn), "__failure_tolerance__", None)


def check_failure_tolerance(task_encoder: Any, where: str) -> None:
    """Refuse a ``failure_tolerance`` the task encoder (datareel's or megatron.energon's) asks for."""
    if task_encoder is None:
        return
    asked = [
        f"{name} (@stateless(failure_tolerance={_tolerance(getattr(task_encoder, name))!r}))"
        for name in HOOKS
        if _tolerance(getattr(task_encoder, name, None)) is not None
    ]
    for cooker in getattr(task_encoder, "cookers", None) or ():
        cook = getattr(cooker, "cook", None)
        if _tolerance(cook) is not None:
            asked.append(f"cooker {getattr(cook, '__name__', cook)!r} (failure_tolerance={_tolerance(cook)!r})")
    default = getattr(type(task_encoder), "__default_failure_tolerance__", ENERGON_DEFAULT)
    if default != ENERGON_DEFAULT:
        asked.append(f"__default_failure_tolerance__ = {default!r}")
    if asked:
        raise OptionError(
            f"{where}: task encoder {type(task_encoder).__name__} asks for a failure tolerance: {'; '.join(asked)}. "
            f"datareel does not count consecutive failures (megatron.energon counts them per worker process, which "
            f"would make a run's batches depend on the number of workers): each failing sample is handled at its "
            f"position (substituted when the WorkerConfig has a global_error_handler; the micro-batch fails with a "
            f"BatchError when 16 substitutes fail). Remove failure_tolerance (and __default_failure_tolerance__); "
            f"to stop at the first failure, give WorkerConfig(global_error_handler=None)"
        )


def check_wrapper_tolerance(value: Any, where: str) -> None:
    """``MapDataset`` / ``BatchDataset(failure_tolerance=)``: Energon's default (100) only, for the same reason."""
    if isinstance(value, bool) or value != ENERGON_DEFAULT:
        raise OptionError(
            f"{where}: failure_tolerance={value!r} asks for a count of consecutive failures, which datareel does not "
            f"keep (each failing sample is handled at its position, the same on every topology); leave "
            f"failure_tolerance out (to stop at the first failure, give WorkerConfig(global_error_handler=None))"
        )
