"""The task-encoder protocol (Energon's method names) and the default behaviour.

A task encoder may implement any subset of ``encode_sample``, ``batch`` and
``encode_batch``; what it leaves out falls back to :class:`DefaultTaskEncoder`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.utils.data import default_collate

from .errors import DatareelError


@runtime_checkable
class TaskEncoder(Protocol):
    """User hook turning raw samples into training batches (every method optional).

    - ``encode_sample(sample) -> sample``: per sample, in a worker; may call
      :func:`datareel.sample_rng` for augmentation randomness.
    - ``batch(samples: list) -> batch``: collate one micro-batch.
    - ``encode_batch(batch) -> batch``: final per-batch transform.
    """

    def encode_sample(self, sample: Any) -> Any: ...

    def batch(self, samples: list[Any]) -> Any: ...

    def encode_batch(self, batch: Any) -> Any: ...


def _is_meta(key: object) -> bool:
    return isinstance(key, str) and key.startswith("__") and key.endswith("__")


class DefaultTaskEncoder:
    """Identity per sample; collates like ``torch.utils.data.default_collate``.

    Dict samples give a dict batch: each ordinary key is collated, meta keys
    (``__key__`` and other ``__name__`` keys) become lists.
    """

    def encode_sample(self, sample: Any) -> Any:
        return sample

    def batch(self, samples: list[Any]) -> Any:
        if samples and isinstance(samples[0], Mapping):
            keys = list(samples[0].keys())
            for sample in samples[1:]:
                if not isinstance(sample, Mapping) or list(sample.keys()) != keys:
                    got = list(sample.keys()) if isinstance(sample, Mapping) else type(sample).__name__
                    raise DatareelError(
                        f"cannot collate a micro-batch whose samples differ in keys: {keys} vs "
                        f"{got}; make encode_sample return the same keys for every sample, or "
                        f"give the task encoder its own batch()"
                    )
            return {k: ([s[k] for s in samples] if _is_meta(k) else _collate(k, [s[k] for s in samples])) for k in keys}
        return _collate(None, samples)

    def encode_batch(self, batch: Any) -> Any:
        return batch


def _collate(key: str | None, values: list[Any]) -> Any:
    try:
        return default_collate(values)
    except (RuntimeError, TypeError) as exc:
        where = f"key {key!r}" if key is not None else "samples"
        raise DatareelError(
            f"default collation failed for {where}: {exc}; give the task encoder a batch() "
            f"that pads or lists these values"
        ) from exc


class ResolvedEncoder:
    """A task encoder with every method present (user's where given, else default's)."""

    def __init__(self, encoder: Any | None):
        default = DefaultTaskEncoder()
        self.encoder = encoder
        for name in ("encode_sample", "batch", "encode_batch"):
            method = getattr(encoder, name, None) if encoder is not None else None
            if method is not None and not callable(method):
                raise DatareelError(f"task_encoder.{name} is {method!r}, which is not callable")
            setattr(self, name, method if method is not None else getattr(default, name))


def positions_tensor(positions: Any) -> torch.Tensor:
    """The ``__positions__`` entry of a batch: int64[m] (made in the process that hands batches out)."""
    return torch.from_numpy(np.asarray(positions, dtype=np.int64).copy())
