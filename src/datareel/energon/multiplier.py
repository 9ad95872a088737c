"""``shuffle_over_epochs_multiplier`` as megatron.energon 7.4.1 reads it, checked once, up front.

Energon takes ``None`` (read in order), ``-1`` (draw slices with replacement, for ever) and ``k >= 1`` (one
permutation of the slices repeated ``k`` times): its check is ``k is None or k == -1 or k >= 1``, and its shuffle
repeats a ``list`` ``k`` times.  So it accepts what compares that way *and* repeats a list: an ``int`` (``True``
repeats it once: ``1``), a numpy integer, and a float equal to ``-1`` (never multiplied); and it refuses
``False``, ``0``, ``-2`` (its assertion), a float ``k >= 1`` such as ``1.0`` or ``2.0``, a numpy bool and a
string (a ``TypeError`` when its workers first shuffle).  In a metadataset YAML it reads the value as
``Optional[int]``: ``true`` is 1 there too, and every float is refused, ``-1.0`` included.
tests/energon/test_energon_multiplier.py runs both beside each other over that family.  datareel refuses the
same values here, by name, before any data moves.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import OptionError

ENDLESS = -1


def energon_multiplier(
    value: object, where: str = "", name: str = "shuffle_over_epochs_multiplier", *, yaml: bool = False
) -> int | None:
    """``value`` as Energon means it: ``None``, ``-1`` or an ``int`` ``>= 1``; else a named :class:`OptionError`
    (``where``: what the message starts with, e.g. ``"get_train_dataset: "``).  ``yaml``: a metadataset's value,
    which Energon reads as ``Optional[int]`` (a float, ``-1.0`` too, is refused there; ``true`` is 1)."""
    if value is None:
        return None
    if isinstance(value, bool):
        if value:
            return 1  # Energon repeats its slice list True times: once, a shuffle each epoch
    elif isinstance(value, (int, np.integer)):
        if value == ENDLESS or value >= 1:
            return int(value)
    elif not yaml and isinstance(value, numbers.Real) and not isinstance(value, np.bool_) and value == ENDLESS:
        return ENDLESS  # Energon compares it with -1 and never multiplies by it
    fix = f"{name}=1 (the default)"
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and float(value).is_integer():
        fix = f"an int: {name}={int(value)}" if value >= 1 or value == ENDLESS else fix
    elif isinstance(value, str) and (number := _integer(value)) is not None and (number == ENDLESS or number >= 1):
        fix = f"an int, not a string: {name}={number}"
    raise OptionError(
        f"{where}{name}={value!r} ({type(value).__name__}) is not a multiplier megatron.energon accepts: it must be "
        f"None (read in order), -1 (draw with replacement, for ever) or an integer k >= 1 (each sample k times in k "
        f"epochs; 1: a shuffle each epoch); pass {fix}"
    )


def _integer(text: str) -> int | None:
    """The whole number ``text`` spells in ASCII digits (an optional ``-``; spaces around), else ``None``:
    ``str.isdigit`` also takes ``'²'``, which ``int()`` refuses."""
    digits = text.strip()
    unsigned = digits[1:] if digits.startswith("-") else digits
    return int(digits) if unsigned.isascii() and unsigned.isdecimal() else None
