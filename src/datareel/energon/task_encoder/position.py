"""Energon's ``current_batch_index`` / ``current_sample_index`` in datareel's terms, read while a hook runs.

Inside ``encode_sample`` the executor makes the sample's reel position current
(:func:`datareel.execute.randomness.sample_context`); inside ``batch`` / ``encode_batch`` the position of the
micro-batch's first unit.  With ``m`` samples per rank and micro-step and ``S = m × world_size`` positions
per micro-step (what the facade loader stamps on the encoder: :func:`datareel.energon.encoder_stamp.stamp`), a
rank's micro-step is
``p // S`` and its sample count ``(p // S) · m + p mod m`` — Energon's numbers for a rank without worker
processes (it counts per worker and interleaves them); the same after every restore and for
:meth:`~datareel.energon.EnergonLoader.restore_sample`, since they follow from the position alone.
"""

from __future__ import annotations

from typing import Any

from ...errors import DatareelError
from ...execute import randomness
from ...plan.rng import DOMAIN_SAMPLE

_ATTR = "_datareel_step_shape"  # what encoder_stamp.stamp(step_shape=) sets


def _shape(encoder: Any, what: str) -> tuple[int, int, Any]:
    context = getattr(randomness._local, "context", None)  # the executor's current sample (or micro-batch)
    shape = getattr(encoder, _ATTR, None)
    if context is None or shape is None:
        raise DatareelError(
            f"{what} is known only while a datareel.energon loader runs this task encoder's hooks "
            f"(encode_sample, batch, encode_batch); read it there"
        )
    return shape[0], shape[1], context


def batch_index(encoder: Any) -> int:
    """This rank's micro-batch count at the hook's sample or micro-batch (from 0, from the reel's start); in a
    generator ``encode_sample`` run for a micro-batch, the micro-batch its current output goes into (the
    output's unit position; while a window is planned, the input's position stands in)."""
    _, step, context = _shape(encoder, "current_batch_index")
    first = getattr(context, "first_unit", None)
    if first is not None and context.domain == DOMAIN_SAMPLE:
        return (first + context.output) // step
    return int(context.position) // step


def sample_index(encoder: Any) -> int:
    """In ``encode_sample``: this rank's sample count at the sample; in ``batch`` / ``encode_batch``: the batch
    count (Energon counts the calls of each hook)."""
    micro, step, context = _shape(encoder, "current_sample_index")
    p = int(context.position)
    if context.domain != DOMAIN_SAMPLE:
        return p // step
    return (p // step) * micro + p % micro
