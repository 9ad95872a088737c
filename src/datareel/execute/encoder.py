"""The task-encoder protocol (Energon's method names) and the default behaviour.

A task encoder may implement any subset of ``encode_sample``, ``batch``,
``encode_batch`` and (for packing) ``pack_selected_samples``; what it leaves
out falls back to :class:`DefaultTaskEncoder`.  Task encoders written for
Energon (subclasses of ``megatron.energon.TaskEncoder``) run unmodified when
they use only those methods; what cannot work without Energon's stateful
pipeline is refused here, at construction, with the reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.utils.data import default_collate

from ..errors import DatareelError, OptionError

HOOKS = ("encode_sample", "batch", "encode_batch", "pack_selected_samples")


@runtime_checkable
class TaskEncoder(Protocol):
    """User hook turning raw samples into training batches (every method optional).

    - ``encode_sample(sample) -> sample``: per sample, in a worker; may call
      :func:`datareel.sample_rng` for augmentation randomness.
    - ``pack_selected_samples(samples: list) -> sample``: with packing, turns one
      planned pack of encoded samples into one sample.
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


def _energon_defined(encoder: Any, name: str) -> bool:
    """Whether ``name`` comes from Megatron-Energon's own classes (i.e. the user did not override it)."""
    for cls in type(encoder).__mro__:
        if name in vars(cls):
            return cls.__module__.startswith("megatron.energon")
    return False


def _is_seed_wrapper(method: Any) -> bool:
    """Whether ``method`` is wrapped by Energon's ``@stateless(restore_seeds=True)`` (it needs Energon's
    worker state; the code object's name survives ``functools.wraps``)."""
    code = getattr(getattr(method, "__func__", method), "__code__", None)
    return (
        code is not None
        and code.co_name in ("seed_wrapper", "seed_wrapper_generator")
        and "energon" in code.co_filename
        and hasattr(getattr(method, "__func__", method), "__wrapped__")
    )


def _is_energon(encoder: Any) -> bool:
    return any(cls.__module__.startswith("megatron.energon") for cls in type(encoder).__mro__)


class ResolvedEncoder:
    """A task encoder with every hook present (the user's where given, else the default).

    ``reseeds``: hooks wrapped by Energon's ``@stateless(restore_seeds=True)``; they run
    unwrapped, with the global RNGs reseeded per sample by datareel instead.
    """

    def __init__(self, encoder: Any | None, *, packing: Any = None):
        default = DefaultTaskEncoder()
        self.encoder = encoder
        self.reseeds: set[str] = set()
        if encoder is not None and _is_energon(encoder):
            self._check_energon(encoder, packing)
        for name in HOOKS:
            method = getattr(encoder, name, None) if encoder is not None else None
            if method is not None and not callable(method):
                raise OptionError(f"task_encoder.{name} is {method!r}, which is not callable")
            if method is not None and name == "pack_selected_samples" and _energon_defined(encoder, name):
                method = None  # Energon's base raises NotImplementedError
            if method is not None:
                if _is_seed_wrapper(method):
                    method = method.__wrapped__.__get__(encoder)  # Energon's restore_seeds: datareel reseeds instead
                    self.reseeds.add(name)
                if inspect.isgeneratorfunction(getattr(method, "__func__", method)):
                    raise OptionError(
                        f"task_encoder.{name} is a generator; datareel plans one output per position, so "
                        f"{name} must return one value (split or skip work in the plan: filters, packing)"
                    )
            fallback = getattr(default, name, None)
            setattr(self, name, method if method is not None else fallback)
        if packing is not None and self.pack_selected_samples is None:
            raise OptionError(
                "packing needs task_encoder.pack_selected_samples(samples) -> one packed sample; define it"
            )
        if packing is not None and packing.over_length == "truncate" and not hasattr(encoder, "truncate_sample"):
            raise OptionError("Packing(over_length='truncate') needs task_encoder.truncate_sample(sample, max_length)")

    @staticmethod
    def _check_energon(encoder: Any, packing: Any) -> None:
        unsupported = []
        if getattr(encoder, "cookers", ()):
            unsupported.append("cookers (cook crude samples with encode_sample instead: datareel samples are dicts)")
        # select_samples_to_pack is never called without packing (Energon too ignores it then); with
        # datareel.Packing, packs are planned from lengths, and a second planner would be ambiguous
        packing_refusals = (("select_samples_to_pack", "datareel.Packing plans packs from lengths"),) if packing else ()
        for name, why in (
            *packing_refusals,
            ("batch_group_criterion", "batches are fixed by the global-batch layout"),
            ("preencode_sample", "use encode_sample"),
            ("postencode_sample", "use encode_sample"),
        ):
            if hasattr(encoder, name) and not _energon_defined(encoder, name):
                unsupported.append(f"{name} ({why})")
        if unsupported:
            raise OptionError(
                f"task encoder {type(encoder).__name__} overrides Energon features datareel does not run: "
                + "; ".join(unsupported)
            )


def positions_tensor(positions: Any) -> torch.Tensor:
    """The ``__positions__`` entry of a batch: int64[m] (made in the process that hands batches out)."""
    return torch.from_numpy(np.asarray(positions, dtype=np.int64).copy())
