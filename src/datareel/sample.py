"""Per-sample context: the RNG that preprocessing code may use for one reel position.

The executor enters :func:`sample_context` around ``encode_sample`` for each
sample; inside it, :func:`sample_rng` returns a generator keyed by
``(seed, position)`` only (invariant I4), so augmentation is the same on every
topology and after every restore.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np

from .errors import SampleContextError
from .plan.rng import sample_seed_sequence

_local = threading.local()


class _Context:
    __slots__ = ("seed", "position", "rng")

    def __init__(self, seed: int, position: int):
        self.seed = seed
        self.position = position
        self.rng: np.random.Generator | None = None


@contextlib.contextmanager
def sample_context(seed: int, position: int) -> Iterator[None]:
    """Make ``(seed, position)`` the current sample for :func:`sample_rng`."""
    previous = getattr(_local, "context", None)
    _local.context = _Context(seed, position)
    try:
        yield
    finally:
        _local.context = previous


def _current() -> _Context:
    context = getattr(_local, "context", None)
    if context is None:
        raise SampleContextError(
            "datareel.sample_rng() was called outside encode_sample; it is keyed by the "
            "position of the sample being encoded, so call it from your task encoder's "
            "encode_sample (or pass a Generator into code that runs elsewhere)"
        )
    return context


def sample_rng() -> np.random.Generator:
    """The random generator of the sample now being encoded.

    Keyed by ``(seed, reel position)``: the same sample position gets the same
    numbers on any world size, worker count or after any restore.  Within one
    sample, repeated calls return the same generator, so draws continue.

    Example::

        class Augment:
            def encode_sample(self, sample):
                rng = datareel.sample_rng()
                sample["crop"] = int(rng.integers(0, 32))
                return sample
    """
    context = _current()
    if context.rng is None:
        context.rng = np.random.Generator(np.random.PCG64(sample_seed_sequence(context.seed, context.position)))
    return context.rng
