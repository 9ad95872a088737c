"""A reel that starts with an adopted remainder: a finite set of ``(leaf, index)`` samples that another loader
had not handed out when it was checkpointed, served once each in a keyed order, then a plan from a later
position (the next epoch).  Pure: numpy in, numpy out.

- :class:`Remainder`: the set (sorted by leaf, then index), the key of its order and the inner positions to
  skip after it; :meth:`Remainder.to_json` writes it as run lengths, compressed, in strings a state can hold.
- :class:`PrefixNode`: reel position ``q < L`` is the remainder's ``q``-th sample in its order; position
  ``L + q`` is the inner plan's position ``skip + q``.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import StateDamagedError
from .permute import permute
from .rng import round_keys

DOMAIN_ADOPT = 0x61646F70  # "adop": the order of an adopted remainder
CHUNK = 4000
"""Characters of the encoded set per string (a state's strings hold at most 4096)."""


@dataclass(frozen=True, eq=False)
class Remainder:
    """The samples to serve first: ``leaves`` int32[L] and ``indices`` int64[L], sorted by (leaf, index),
    each pair once; ``key`` keys their order (``shuffle=False``: the sorted order); ``skip``: the inner
    plan's positions that the adopted epoch covered (the reel continues at inner position ``skip``)."""

    leaves: np.ndarray
    indices: np.ndarray
    key: int
    skip: int
    shuffle: bool = True

    def __len__(self) -> int:
        return len(self.leaves)

    def order(self) -> tuple[np.ndarray, np.ndarray]:
        """The remainder in serving order: (leaves int32[L], indices int64[L])."""
        n = len(self.leaves)
        if n == 0 or not self.shuffle:
            return self.leaves, self.indices
        where = permute(np.arange(n, dtype=np.int64), n, round_keys(DOMAIN_ADOPT, self.key))  # (L,)
        return self.leaves[where], self.indices[where]

    def digest(self) -> str:
        return hashlib.blake2b(self._packed(), digest_size=8).hexdigest()

    def _packed(self) -> bytes:
        """Runs of consecutive indices of one leaf as int64 triples (leaf, start, length), compressed."""
        if not len(self.leaves):
            return zlib.compress(b"")
        leaves, indices = self.leaves.astype(np.int64), self.indices
        breaks = np.flatnonzero((np.diff(leaves) != 0) | (np.diff(indices) != 1)) + 1  # (runs - 1,)
        starts = np.concatenate([[0], breaks])  # (runs,)
        lengths = np.diff(np.concatenate([starts, [len(leaves)]]))  # (runs,)
        triples = np.stack([leaves[starts], indices[starts], lengths], axis=1)  # (runs, 3)
        return zlib.compress(triples.astype("<i8").tobytes(), 9)

    def to_json(self) -> dict[str, Any]:
        text = base64.b64encode(self._packed()).decode("ascii")
        return {
            "samples": len(self),
            "skip": int(self.skip),
            "key": int(self.key),
            "shuffle": bool(self.shuffle),
            "digest": self.digest(),
            "runs": [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)] or [""],
        }

    @classmethod
    def from_json(cls, value: Any) -> Remainder:
        """The remainder a state recorded; a damaged record is refused naming what is wrong."""
        try:
            raw = zlib.decompress(base64.b64decode("".join(value["runs"]), validate=True))
            triples = np.frombuffer(raw, dtype="<i8").reshape(-1, 3)  # (runs, 3)
            lengths = triples[:, 2]
            if (lengths < 1).any() or (triples[:, :2] < 0).any():
                raise ValueError("a run of no samples or a negative index")
            leaves = np.repeat(triples[:, 0], lengths).astype(np.int32)  # (L,)
            starts = np.repeat(triples[:, 1] - np.cumsum(lengths) + lengths, lengths)  # (L,)
            indices = (starts + np.arange(int(lengths.sum()), dtype=np.int64)).astype(np.int64)  # (L,)
            out = cls(leaves, indices, int(value["key"]), int(value["skip"]), bool(value["shuffle"]))
        except (KeyError, TypeError, ValueError, zlib.error) as exc:
            raise StateDamagedError(
                f"the state's adopted remainder cannot be read ({exc}); restore the checkpoint it was saved in, "
                f"as written"
            ) from None
        if len(out) != value["samples"] or out.digest() != value["digest"]:
            raise StateDamagedError(
                f"the state's adopted remainder holds {len(out)} samples of digest {out.digest()}, its record says "
                f"{value['samples']} of {value['digest']}: the state was changed; restore it as written"
            )
        return out


@dataclass(frozen=True, eq=False)
class PrefixNode:
    """The remainder's samples first (``leaves``/``indices`` in serving order), then ``inner`` from ``skip``."""

    leaves: np.ndarray
    indices: np.ndarray
    skip: int
    inner: Any

    def resolve(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q: int64[k] -> (leaf ids int32[k], sample indices int64[k])."""
        q = np.asarray(q, dtype=np.int64)
        n = len(self.leaves)
        head = q < n  # (k,)
        leaves = np.empty(len(q), dtype=np.int32)
        indices = np.empty(len(q), dtype=np.int64)
        leaves[head], indices[head] = self.leaves[q[head]], self.indices[q[head]]
        if not head.all():
            tail_leaves, tail_indices = self.inner.resolve(q[~head] - n + self.skip)  # (k_tail,) each
            leaves[~head], indices[~head] = tail_leaves, tail_indices
        return leaves, indices
