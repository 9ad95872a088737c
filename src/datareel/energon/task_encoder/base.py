"""Energon's task-encoder base, written for datareel: ``TaskEncoder`` / ``DefaultTaskEncoder`` (usable
as generics), ``Batch``, ``stateless``, the batching helpers and error handlers.

Only the behaviour a training script sees is reproduced (names, signatures,
default batching); Energon's pipeline classes are not.  Which hooks datareel
calls, and when, is in ``docs/migrating-from-energon.md``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch

from ...sources.typed import _Fields, edataclass
from . import position
from .cooking import Cooker

log = logging.getLogger("datareel")

T_sample = TypeVar("T_sample")
T_encoded_sample = TypeVar("T_encoded_sample")
T_raw_batch = TypeVar("T_raw_batch")
T_batch = TypeVar("T_batch")
F = TypeVar("F", bound=Callable[..., Any])


def stateless(
    fn: Callable[..., Any] | None = None, *, restore_seeds: bool = False, failure_tolerance: int | None = None
) -> Any:
    """Energon's marker for hooks without hidden state.  ``restore_seeds=True``: the global ``random``,
    ``numpy.random`` and ``torch`` generators are seeded per sample (by ``(seed, reel position)``) while
    the hook runs, the same on every topology and after every restore.  ``failure_tolerance`` is recorded and
    refused where a dataset is made (:mod:`.tolerance`: datareel keeps no count of consecutive failures).  The
    function is returned itself."""
    if fn is None:
        return lambda f: stateless(f, restore_seeds=restore_seeds, failure_tolerance=failure_tolerance)
    fn.__stateless__ = True  # type: ignore[attr-defined]
    fn.__restore_seeds__ = bool(restore_seeds)  # type: ignore[attr-defined]
    if failure_tolerance is not None:
        fn.__failure_tolerance__ = failure_tolerance  # type: ignore[attr-defined]
    return fn


def get_stateless(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__stateless__", False))


# -- batching helpers (Energon's names and behaviour) -----------------------------------------------------
def batch_stack(batch: list[Any]) -> Any:
    return torch.stack(batch, dim=0)


def batch_pad_stack(batch: list[Any]) -> Any:
    """Tensors of any sizes stacked into one, zero-padded to the largest size in each dimension."""
    shape = [max(t.shape[d] for t in batch) for d in range(batch[0].ndim)]
    out = batch[0].new_zeros((len(batch), *shape))
    for i, t in enumerate(batch):
        out[(i, *(slice(0, s) for s in t.shape))] = t
    return out


def batch_list(batch: list[Any]) -> Any:
    return batch


def generic_batch(batch: list[Any]) -> Any:
    """Tensors pad-stacked; dicts, dataclasses and named tuples batched field by field; the rest listed."""
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return batch_pad_stack(batch)
    if isinstance(first, dict):
        return {k: generic_batch([s[k] for s in batch]) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        if hasattr(first, "from_samples"):
            return first.from_samples(batch)
        return type(first)(**{f.name: generic_batch([getattr(s, f.name) for s in batch]) for f in _init_fields(first)})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(**{f: generic_batch([getattr(s, f) for s in batch]) for f in first._fields})
    return batch_list(batch)


def is_sample(value: Any) -> bool:
    """Whether ``value`` is a sample dataclass by its fields (``__key__``, ``__restore_key__``, ``__subflavors__``:
    datareel.energon's ``Sample``, megatron.energon's, or one of the user's with those fields)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    return {"__key__", "__restore_key__", "__subflavors__"} <= {f.name for f in dataclasses.fields(value)}


def _init_fields(obj: Any) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(obj) if f.init]


@edataclass
class Batch(_Fields):
    """The base of batch dataclasses (``megatron.energon.Batch``'s fields)."""

    __key__: list[str]
    __restore_key__: tuple[Any, ...] = ()
    __subflavors__: list[Any] | None = None
    __sources__: tuple[Any, ...] | None = None

    @classmethod
    def derive_from(cls, base_batch: Any, **kwargs: Any) -> Any:
        for field in dataclasses.fields(Batch):
            kwargs.setdefault(field.name, getattr(base_batch, field.name, None))
        return cls(**kwargs)

    @classmethod
    def from_samples(cls, samples: Sequence[Any], **kwargs: Any) -> Any:
        """A batch of ``samples`` (dataclasses): each field a list of the samples' values (as in Energon)."""
        args: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            if field.name in kwargs:
                args[field.name] = kwargs[field.name]
            elif field.name == "__sources__":
                if any(getattr(s, "__sources__", None) is not None for s in samples):  # () too, as Energon
                    args[field.name] = tuple(x for s in samples for x in (s.__sources__ or ()))
            elif field.name == "__subflavors__":
                if any(getattr(s, "__subflavors__", None) is not None for s in samples):
                    args[field.name] = [s.__subflavors__ for s in samples if s.__subflavors__]
            else:  # Energon 7.4.1 lists every other field (tensors too): code written for it expects lists
                args[field.name] = [getattr(s, field.name) for s in samples]
        return cls(**args)


# -- task encoders -------------------------------------------------------------------------------------
class TaskEncoder(Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Energon's task-encoder base: override the hooks you need (see ``docs/migrating-from-energon.md``).

    ``encode_sample`` may be a generator (0, 1 or more outputs per sample); with ``packing_buffer_size``,
    ``select_samples_to_pack`` and ``pack_selected_samples`` pack online; ``cookers`` cook crude samples.
    """

    cookers: Sequence[Cooker[Any]] = ()

    def encode_sample(self, sample: Any) -> Any:
        return sample

    def batch(self, samples: list[Any]) -> Any:
        return self._batch(samples, type(samples[0]))

    def encode_batch(self, batch: Any) -> Any:
        return batch

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        raise NotImplementedError("select_samples_to_pack is only used with packing_buffer_size")

    @property
    def current_batch_index(self) -> int:
        """This rank's micro-batch count at the sample or batch being encoded (:mod:`.position`)."""
        return position.batch_index(self)

    @property
    def current_sample_index(self) -> int:
        """This rank's sample count in ``encode_sample``, its batch count in ``batch`` / ``encode_batch``."""
        return position.sample_index(self)

    @property
    def cache(self) -> Any:
        """The ``cache_pool`` given to ``get_(savable_)loader`` (``None`` without one)."""
        return getattr(self, "_datareel_cache_pool", None)

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        raise NotImplementedError("pack_selected_samples is only used with packing")

    def _batch(
        self,
        samples: list[Any],
        result_type: type[Any],
        actions: dict[str, Callable[[list[Any]], Any]] | None = None,
        default_action: Callable[[list[Any]], Any] = generic_batch,
    ) -> Any:
        """Energon's default batching of ``samples`` into ``result_type`` (dict, dataclass or named tuple)."""
        if dataclasses.is_dataclass(result_type) and hasattr(result_type, "from_samples"):
            return result_type.from_samples(samples)
        first = samples[0]
        if isinstance(first, dict):
            columns = {k: [s[k] for s in samples] for k in first}
        elif dataclasses.is_dataclass(first):
            columns = {f.name: [getattr(s, f.name) for s in samples] for f in _init_fields(first)}
        elif isinstance(first, tuple) and hasattr(first, "_fields"):
            columns = {f: [getattr(s, f) for s in samples] for f in first._fields}
        else:
            raise TypeError(f"cannot batch samples of type {type(first).__name__}; give the task encoder a batch()")
        actions = actions or {}
        columns = {k: actions.get(k, default_action)(v) for k, v in columns.items()}
        return columns if issubclass(result_type, dict) else result_type(**columns)


class DefaultTaskEncoder(TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Energon's ``DefaultTaskEncoder``: identity per sample, field-wise batching, optional target types
    (``encoded_sample_type``, ``raw_batch_type``, ``batch_type``) filled by field name."""

    def __init__(
        self,
        *,
        encoded_sample_type: type[Any] | None = None,
        raw_batch_type: type[Any] | None = None,
        batch_type: type[Any] | None = None,
    ):
        self._encoded_sample_type = encoded_sample_type
        self._raw_batch_type = raw_batch_type
        self._batch_type = batch_type

    def encode_sample(self, sample: Any) -> Any:
        target = getattr(self, "_encoded_sample_type", None)
        if target is None or isinstance(sample, target):
            return sample
        return _convert(sample, target)

    def batch(self, samples: list[Any]) -> Any:
        actions = {"__subflavors__": batch_list} if is_sample(samples[0]) else None
        target = getattr(self, "_raw_batch_type", None)
        return self._batch(samples, type(samples[0]) if target is None else target, actions=actions)

    def encode_batch(self, batch: Any) -> Any:
        target = getattr(self, "_batch_type", None)
        if target is None or target == getattr(self, "_raw_batch_type", None):
            return batch
        return _convert(batch, target)


class AugmentTaskEncoder(TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Energon's ``AugmentTaskEncoder``: every call forwarded to ``task_encoder``; subclass it and override
    the hooks to change (call ``super()`` to reach the wrapped encoder's)."""

    def __init__(self, task_encoder: Any):
        self._task_encoder = task_encoder

    @property
    def decoder(self) -> Any:
        return self._task_encoder.decoder  # AttributeError when the wrapped one has none

    @property
    def cookers(self) -> Sequence[Cooker[Any]]:  # type: ignore[override]
        return getattr(self._task_encoder, "cookers", ())

    def encode_sample(self, sample: Any) -> Any:
        return self._task_encoder.encode_sample(sample)

    def batch(self, samples: list[Any]) -> Any:
        return self._task_encoder.batch(samples)

    def encode_batch(self, batch: Any) -> Any:
        return self._task_encoder.encode_batch(batch)


def _convert(value: Any, target: type[Any]) -> Any:
    """``value`` (dataclass, named tuple or dict) as ``target``, fields matched by name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in _init_fields(value)}
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = dict(zip(value._fields, value))
    elif isinstance(value, dict):
        fields = dict(value)
    else:
        raise TypeError(f"cannot convert a {type(value).__name__} to {target.__name__}: fields are matched by name")
    return fields if issubclass(target, dict) else target(**fields)


def log_exception(exc: Exception, sample: Any, sources: Any = None) -> None:
    """An error handler (``handler=``) that logs the failure and lets the loader go on."""
    log.error("sample %s failed: %s: %s", sample, type(exc).__name__, exc)


def reraise_exception(exc: Exception, sample: Any = None, sources: Any = None) -> None:
    """An error handler (``handler=``) that stops the loader with the sample's error."""
    raise exc
