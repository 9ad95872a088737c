"""Key derivation: every random choice in datareel is keyed, never additive.

All keys come from :class:`numpy.random.SeedSequence` over a tuple whose first
entry names the purpose (a *domain*), so a permutation key can never equal a
sample RNG key, and ``(seed, epoch)`` pairs never collide the way
``seed + epoch`` does (invariant I4).
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from .permute import ROUNDS

DOMAIN_PERMUTE = 0x7065726D  # "perm"
DOMAIN_SAMPLE = 0x73616D70  # "samp"
DOMAIN_PACK = 0x7061636B  # "pack"
DOMAIN_SUBSTITUTE = 0x73756273  # "subs"
DOMAIN_POST = 0x706F7374  # "post": postencode_sample of one output of a windowed stage
DOMAIN_SELECT = 0x73656C63  # "selc": select_samples_to_pack of one window
DOMAIN_BATCH_BLEND = 0x62626C64  # "bbld": the order of one block of a batch-granular blend (plan.batch_blend)


def name_key(name: str) -> int:
    """A stable 64-bit integer for a string (the same in every process and Python run)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")


def round_keys(*entropy: int) -> np.ndarray:
    """Feistel round keys from ``entropy`` (a domain first, then what the keys belong to). -> uint64[ROUNDS],
    read-only (callers cache them)."""
    keys = np.random.SeedSequence(list(entropy)).generate_state(ROUNDS, dtype=np.uint64)
    keys.setflags(write=False)
    return keys


@functools.lru_cache(maxsize=4096)
def permutation_keys(seed: int, source_key: int, epoch: int) -> np.ndarray:
    """Round keys of the shuffle of ``epoch`` of the source named by ``source_key``.

    -> uint64[ROUNDS]; cached, and read-only so the cache cannot be corrupted.
    """
    return round_keys(DOMAIN_PERMUTE, seed, source_key, epoch)


def sample_seed_sequence(seed: int, position: int) -> np.random.SeedSequence:
    """The seed sequence of reel position ``position``: a function of ``(seed, position)`` only."""
    return np.random.SeedSequence([DOMAIN_SAMPLE, seed, position])
