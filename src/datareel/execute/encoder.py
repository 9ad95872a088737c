"""The task-encoder protocol (Energon's method names) and the default behaviour.

A task encoder may implement any subset of ``encode_sample``, ``batch``,
``encode_batch`` and (for packing) ``pack_selected_samples``; what it leaves
out falls back to :class:`DefaultTaskEncoder`.  Task encoders written for
Energon (subclasses of ``megatron.energon.TaskEncoder``) run unmodified when
they use only those methods; what cannot work without Energon's stateful
pipeline is refused here, at construction, with the reason.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.utils.data import default_collate

from ..errors import DatareelError, OptionError
from .randomness import current_context

HOOKS = ("encode_sample", "batch", "encode_batch", "pack_selected_samples")
STAGE_HOOKS = ("preencode_sample", "postencode_sample", "select_samples_to_pack")


@runtime_checkable
class TaskEncoder(Protocol):
    """User hook turning raw samples into training batches (every method optional).

    - ``encode_sample(sample) -> sample``: per sample, in a worker; may call
      :func:`datareel.sample_rng` for augmentation randomness.
    - ``pack_selected_samples(samples: list) -> sample``: with packing, turns one
      planned pack of encoded samples into one sample.
    - ``batch(samples: list) -> batch``: collate one micro-batch.
    - ``encode_batch(batch) -> batch``: final per-batch transform.

    An encoder with ``annotate_batches = False`` gets its dict samples and batches as it makes them: datareel
    adds no ``__source__`` / ``__positions__`` to them (``datareel.energon`` sets it, as Energon adds none).
    """

    def encode_sample(self, sample: Any) -> Any: ...

    def batch(self, samples: list[Any]) -> Any: ...

    def encode_batch(self, batch: Any) -> Any: ...


def _is_meta(key: object) -> bool:
    return isinstance(key, str) and key.startswith("__") and key.endswith("__")


def _is_dataclass(sample: Any) -> bool:
    return dataclasses.is_dataclass(sample) and not isinstance(sample, type)


def _record(sample: Any) -> Mapping[str, Any] | None:
    """A dict or dataclass sample as a mapping of its keys (fields); ``None`` for any other sample."""
    if _is_dataclass(sample):
        return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    return sample if isinstance(sample, Mapping) else None


class DefaultTaskEncoder:
    """Identity per sample; collates like ``torch.utils.data.default_collate``.

    Dict (and dataclass) samples give a dict batch: each ordinary key is collated, meta keys
    (``__key__`` and other ``__name__`` keys) become lists.
    """

    def encode_sample(self, sample: Any) -> Any:
        return sample

    def batch(self, samples: list[Any]) -> Any:
        if samples and _record(samples[0]) is not None:
            first = _is_dataclass(samples[0])
            records = [_record(s) if _is_dataclass(s) == first else None for s in samples]  # one kind only
            keys = list(records[0] or ())
            for sample, record in zip(samples[1:], records[1:]):
                if record is None or list(record.keys()) != keys:
                    got = list(record.keys()) if record is not None else type(sample).__name__
                    raise DatareelError(
                        f"cannot collate a micro-batch whose samples differ in keys: {keys} vs "
                        f"{got}; make encode_sample return the same keys for every sample, or "
                        f"give the task encoder its own batch()"
                    )
            return {
                k: ([r[k] for r in records] if _is_meta(k) else _collate(k, [r[k] for r in records]))  # type: ignore[index]
                for k in keys
            }
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


_BASE_MODULES = ("megatron.energon", "datareel.energon", "datareel.execute.encoder")


def _base_defined(encoder: Any, name: str) -> bool:
    """Whether ``name`` comes from a base class (Energon's, datareel's facade or default), i.e. the user did
    not override it."""
    for cls in type(encoder).__mro__:
        if name in vars(cls):
            return cls.__module__.startswith(_BASE_MODULES)
    return False


def _overrides(encoder: Any, name: str) -> bool:
    return hasattr(encoder, name) and not _base_defined(encoder, name)


def is_seed_wrapper(method: Any) -> bool:
    """Whether ``method`` is wrapped by Megatron-Energon's ``@stateless(restore_seeds=True)`` (it needs
    Energon's worker state; the code object's name survives ``functools.wraps``)."""
    code = getattr(getattr(method, "__func__", method), "__code__", None)
    return (
        code is not None
        and code.co_name in ("seed_wrapper", "seed_wrapper_generator")
        and "energon" in code.co_filename
        and hasattr(getattr(method, "__func__", method), "__wrapped__")
    )


def _is_energon(encoder: Any) -> bool:
    bases = ("megatron.energon", "datareel.energon.task_encoder")
    return any(cls.__module__.startswith(bases) for cls in type(encoder).__mro__)


def _is_generator(method: Any) -> bool:
    return inspect.isgeneratorfunction(getattr(method, "__func__", method))


class ResolvedEncoder:
    """A task encoder with every hook present (the user's where given, else the default).

    - ``reseeds``: hooks marked ``@stateless(restore_seeds=True)`` (datareel's or Energon's: those run
      unwrapped, with the global RNGs reseeded per sample by datareel);
    - ``first`` / ``post``: the windowed stage's two halves: ``preencode_sample`` (else ``encode_sample``)
      and ``postencode_sample`` (else identity);
    - ``windowed``: whether the first stage is a generator (0, 1 or more outputs per input), so the
      loader must plan outputs in the windowed stage;
    - ``online``: packs are chosen by ``select_samples_to_pack`` (``WindowedStage(pack=True)``).
    """

    def __init__(self, encoder: Any | None, *, packing: Any = None, online: bool = False, grouped: bool = False):
        default = DefaultTaskEncoder()
        self.encoder = encoder
        self.reseeds: set[str] = set()
        self.online = online
        # dict samples and batches get __source__ / __positions__ unless the encoder says annotate_batches = False
        self.annotate = bool(getattr(encoder, "annotate_batches", True))
        user = {name: self._hook(encoder, name) for name in (*HOOKS, *STAGE_HOOKS)} if encoder is not None else {}
        for name in HOOKS:
            setattr(self, name, user.get(name) or getattr(default, name, None))
        if encoder is not None and _is_energon(encoder):
            self._check_energon(encoder, packing, online, grouped)
        pre, post = user.get("preencode_sample"), user.get("postencode_sample")
        if pre is not None and _overrides(encoder, "encode_sample"):
            raise OptionError(
                f"task encoder {type(encoder).__name__} defines both encode_sample and preencode_sample; define "
                f"encode_sample, or preencode_sample + postencode_sample"
            )
        self.first = pre or self.encode_sample
        self.post = post
        self.select_samples_to_pack = user.get("select_samples_to_pack")
        self.windowed = _is_generator(self.first)
        self.cookers = list(getattr(encoder, "cookers", None) or ())
        for c in self.cookers:
            if getattr(c, "need_primary", False) or getattr(c, "need_cache", False):
                raise OptionError(
                    f"cooker {getattr(c.cook, '__name__', c.cook)!r} asks for need_primary / need_cache (auxiliary "
                    f"datasets), which datareel does not provide; cook from the crude sample alone"
                )
        self.sample_classes = _energon_sample_classes(encoder)
        if online and (self.select_samples_to_pack is None or self.pack_selected_samples is None):
            raise OptionError(
                "online packing (packing_buffer_size / WindowedStage(pack=True)) needs the task encoder to define "
                "select_samples_to_pack(samples) -> [[sample, ...], ...] and pack_selected_samples(samples)"
            )
        if packing is not None and self.pack_selected_samples is None:
            raise OptionError(
                "packing needs task_encoder.pack_selected_samples(samples) -> one packed sample; define it"
            )
        if packing is not None and packing.over_length == "truncate" and not hasattr(encoder, "truncate_sample"):
            raise OptionError("Packing(over_length='truncate') needs task_encoder.truncate_sample(sample, max_length)")

    def _hook(self, encoder: Any, name: str) -> Any:
        """The user's ``name`` hook (unwrapped from Energon's seed wrapper), ``None`` if only a base has it."""
        method = getattr(encoder, name, None)
        if method is None or (_base_defined(encoder, name) and name not in HOOKS[:3]):
            return None
        if not callable(method):
            raise OptionError(f"task_encoder.{name} is {method!r}, which is not callable")
        if is_seed_wrapper(method):
            method = method.__wrapped__.__get__(encoder)  # Energon's restore_seeds: datareel reseeds instead
            self.reseeds.add(name)
        elif getattr(method, "__restore_seeds__", False):
            self.reseeds.add(name)
        if _is_generator(method) and name not in ("encode_sample", "preencode_sample"):
            raise OptionError(
                f"task_encoder.{name} is a generator; only encode_sample / preencode_sample may yield (0, 1 or "
                f"more outputs per sample); {name} must return one value"
            )
        return method

    def cook(self, raw: Any) -> Any:
        """A crude sample through the first matching cooker; a typed one as the encoder's own class."""
        if self.cookers and isinstance(raw, dict):
            sources = raw.get("__sources__")
            if "__shard__" not in raw and sources:  # a crude sample names its shard, as Energon's does
                raw = type(raw)({**raw, "__shard__": sources[0].shard_name})
            subflavors = raw.get("__subflavors__") or {}
            for c in self.cookers:
                if c.is_match(subflavors):
                    return c.cook(raw)
            raise DatareelError(
                f"no cooker of the task encoder matches sample {raw.get('__key__')!r} with subflavors "
                f"{subflavors}; add a Cooker(cook) without has_subflavors, or one matching these"
            )
        if self.sample_classes and type(raw).__name__ in self.sample_classes and not isinstance(raw, dict):
            cls = self.sample_classes[type(raw).__name__]
            return cls(**{f.name: getattr(raw, f.name) for f in dataclasses.fields(raw)})
        return raw

    def outputs(self, sample: Any) -> list[Any]:
        """The first stage's outputs for one sample (a generator's, in order; else exactly one)."""
        result = self.first(sample)
        if not self.windowed:
            return [result]
        out: list[Any] = []
        context = current_context()  # which output is being made: a generator's current_batch_index reads it
        for made in result:
            out.append(made)
            if context is not None:
                context.output = len(out)
        return out

    @staticmethod
    def _check_energon(encoder: Any, packing: Any, online: bool, grouped: bool = False) -> None:
        unsupported = []
        if packing is not None and _overrides(encoder, "select_samples_to_pack"):
            unsupported.append(
                "select_samples_to_pack with datareel.Packing (packs are planned from lengths there; use "
                "packing_buffer_size / WindowedStage(pack=True) to pack online with it)"
            )
        if _overrides(encoder, "batch_group_criterion") and not grouped:  # the facade runs it (energon/grouping.py)
            unsupported.append(
                "batch_group_criterion (batches are fixed by the global-batch layout; datareel.energon's loaders "
                "group batches)"
            )
        if unsupported:
            raise OptionError(
                f"task encoder {type(encoder).__name__} overrides Energon features datareel does not run: "
                + "; ".join(unsupported)
            )


def _energon_sample_classes(encoder: Any) -> dict[str, type]:
    """Megatron-Energon's typed sample classes by name, when the encoder derives from its TaskEncoder
    (its code may check ``isinstance`` against them); else none (datareel's classes are used)."""
    if encoder is None or not any(cls.__module__.startswith("megatron.energon") for cls in type(encoder).__mro__):
        return {}
    import megatron.energon as energon  # installed: the encoder derives from it

    from ..sources.typed import SAMPLE_CLASSES

    return {name: getattr(energon, name) for name in SAMPLE_CLASSES if hasattr(energon, name)}


def positions_tensor(positions: Any) -> torch.Tensor:
    """The ``__positions__`` entry of a batch: int64[m] (made in the process that hands batches out)."""
    return torch.from_numpy(np.asarray(positions, dtype=np.int64).copy())
