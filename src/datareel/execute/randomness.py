"""Per-sample context: the randomness preprocessing code may use for one reel position.

The executor enters :func:`sample_context` around ``encode_sample`` for each
sample (and around ``pack_selected_samples`` for each pack); inside it,
:func:`sample_rng` and :func:`sample_torch_generator` are keyed by
``(seed, position)`` only (invariant I4), and with ``reseed_global_rng`` the
global ``random``, ``numpy.random`` and ``torch`` generators are reseeded the
same way, so augmentation is the same on every topology and after every restore.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

import numpy as np
import torch

from ..errors import SampleContextError
from ..plan.rng import DOMAIN_PACK, DOMAIN_SAMPLE, sample_seed_sequence

_local = threading.local()
_DOMAIN_GLOBAL, _DOMAIN_TORCH = 0x676C6F62, 0x746F7263  # "glob", "torc"


class _Context:
    __slots__ = ("seed", "position", "domain", "rng", "first_unit", "output")

    def __init__(self, seed: int, position: int, domain: int, first_unit: int | None = None):
        self.seed, self.position, self.domain = seed, position, domain
        self.rng: np.random.Generator | None = None
        # a generator encode_sample made for a micro-batch: the reel (unit) position of its first output, and
        # which output it is making now (ResolvedEncoder.outputs advances it); None while a window is planned
        self.first_unit, self.output = first_unit, 0


@contextlib.contextmanager
def sample_context(
    seed: int,
    position: int,
    *,
    pack: bool = False,
    reseed_global: bool = False,
    domain: int | None = None,
    first_unit: int | None = None,
) -> Iterator[None]:
    """Make ``(seed, position)`` the current sample (or, with ``pack=True``, the current pack; ``domain``
    names another purpose, e.g. a windowed stage's ``postencode_sample``; ``first_unit``: where a generator's
    first output lies in the window reel, when a micro-batch is made)."""
    previous = getattr(_local, "context", None)
    kind = domain if domain is not None else DOMAIN_PACK if pack else DOMAIN_SAMPLE
    context = _Context(seed, position, kind, first_unit)
    _local.context = context
    saved = None
    if reseed_global:  # the caller's global generators (the training loop's, with num_workers=0) are kept
        saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        reseed_global_rngs(context)
    try:
        yield
    finally:
        _local.context = previous
        if saved is not None:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])


def reseed_global_rngs(context: _Context) -> None:
    """Seed ``random``, ``numpy.random`` and ``torch`` from the context's key."""
    words = np.random.SeedSequence([_DOMAIN_GLOBAL, context.domain, context.seed, context.position]).generate_state(
        3, dtype=np.uint64
    )
    random.seed(int(words[0]))
    np.random.seed(int(words[1] & 0xFFFFFFFF))
    torch.manual_seed(int(words[2] & 0x7FFFFFFFFFFFFFFF))


def current_context() -> _Context | None:
    """The current sample's context (``None`` outside :func:`sample_context`)."""
    return getattr(_local, "context", None)


def _current() -> _Context:
    context = getattr(_local, "context", None)
    if context is None:
        raise SampleContextError(
            "datareel.sample_rng() was called outside encode_sample / pack_selected_samples; it is keyed by "
            "the position being encoded, so call it from your task encoder (or pass a Generator into code "
            "that runs elsewhere)"
        )
    return context


def sample_rng() -> np.random.Generator:
    """The numpy generator of the sample now being encoded.

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
        if context.domain == DOMAIN_SAMPLE:
            sequence = sample_seed_sequence(context.seed, context.position)
        else:
            sequence = np.random.SeedSequence([context.domain, context.seed, context.position])
        context.rng = np.random.Generator(np.random.PCG64(sequence))
    return context.rng


def sample_torch_generator() -> torch.Generator:
    """A ``torch.Generator`` keyed like :func:`sample_rng` (a fresh one per call, same seed)."""
    context = _current()
    word = np.random.SeedSequence([_DOMAIN_TORCH, context.domain, context.seed, context.position]).generate_state(
        1, dtype=np.uint64
    )[0]
    return torch.Generator().manual_seed(int(word & 0x7FFFFFFFFFFFFFFF))
