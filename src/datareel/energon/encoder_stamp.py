"""What the facade loader gives the task encoder it runs (:func:`stamp`): the step shape that
:mod:`.task_encoder.position` reads for Energon's ``current_batch_index`` / ``current_sample_index``, and the
cache pool that is its ``cache``; an encoder derived from megatron.energon's is adopted first
(:func:`.foreign.adopt_encoder`), so those properties are the facade's."""

from __future__ import annotations

from typing import Any

from .foreign import adopt_encoder

__all__ = ["plain_batches", "stamp"]


def stamp(encoder: Any, **values: Any) -> None:
    """Give ``encoder`` (and the one an ``AugmentTaskEncoder`` wraps) what the facade loader that runs it
    knows: ``step_shape=(m, S)``, ``cache_pool=``; they travel to the workers with it.  An encoder derived
    from megatron.energon's gets the facade's properties that read them (:func:`.foreign.adopt_encoder`)."""
    while encoder is not None:
        adopt_encoder(encoder)  # megatron.energon's cache / current_*_index properties: the facade's
        try:
            for name, value in values.items():
                setattr(encoder, f"_datareel_{name}", value)
        except AttributeError:  # a slotted or frozen encoder: its hooks cannot ask for them
            return
        encoder = getattr(encoder, "_task_encoder", None)


def plain_batches(encoder: Any) -> None:
    """Ask the core for ``encoder``'s dict samples and batches as it makes them (``annotate_batches = False``:
    no ``__source__`` / ``__positions__`` added), as megatron.energon hands them out; a slotted or frozen
    encoder keeps them."""
    try:
        encoder.annotate_batches = False
    except AttributeError:
        pass
