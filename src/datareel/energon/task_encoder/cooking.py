"""Cookers (``megatron.energon.task_encoder.cooking``'s names): turn crude samples into typed ones.

A cook function takes the crude sample and, as keyword arguments, the file stores of the leaf's
auxiliary datasets by their ``aux:`` names (:mod:`datareel.blend.aux`); ``@cooker(need_primary=True)``
adds ``primary`` (the store of the sample's own dataset; a key starting with ``.`` is the sample's own
key followed by it) and ``@cooker(need_cache=True)`` adds ``cache`` (the loader's ``cache_pool``).
Stores decode what they read with the task encoder's ``decoder`` (Energon's default ``SampleDecoder()``;
``None``: raw bytes), and record each read in the crude sample's ``__sources__``.

:func:`bind_cookers` gives a task encoder those arguments: its cookers are replaced (on the instance) by
:class:`BoundCooker` s whose ``cook`` takes the crude sample alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ...errors import OptionError
from ...sources.typed import Sample

T_sample = TypeVar("T_sample")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["BoundCooker", "Cooker", "basic_sample_keys", "bind_cookers", "cooker"]

_DEFAULT = object()


def cooker(fn: F | None = None, *, need_cache: bool = False, need_primary: bool = False) -> Any:
    """Marks a cook function: ``need_primary`` -> it is also given ``primary=`` (the store of the sample's own
    dataset), ``need_cache`` -> ``cache=`` (the loader's cache pool)."""
    if fn is None:
        return lambda f: cooker(f, need_cache=need_cache, need_primary=need_primary)
    fn.__cooker_need_cache__ = need_cache  # type: ignore[attr-defined]
    fn.__cooker_need_primary__ = need_primary  # type: ignore[attr-defined]
    return fn


def get_cooker_need_cache(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__cooker_need_cache__", False))


def get_cooker_need_primary(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__cooker_need_primary__", False))


@dataclasses.dataclass
class Cooker(Generic[T_sample]):
    """Turns a crude sample (a dict) into a typed one: ``cook(crude, **stores) -> sample``, for crude samples
    whose ``__subflavors__`` hold every item of ``has_subflavors`` (``None``: every crude sample)."""

    cook: Callable[..., T_sample]
    has_subflavors: dict[str, Any] | None = None

    @property
    def need_primary(self) -> bool:
        return get_cooker_need_primary(self.cook)

    @property
    def need_cache(self) -> bool:
        return get_cooker_need_cache(self.cook)

    def is_match(self, subflavors: dict[str, Any] | None) -> bool:
        subflavors = subflavors or {}
        return all(k in subflavors and subflavors[k] == v for k, v in (self.has_subflavors or {}).items())


class _Cook:
    """A cook function with its stores bound: ``(crude) -> sample`` (picklable: workers receive it)."""

    def __init__(self, fn: Callable[..., Any], decoder: Any, pool: Any):
        self.fn, self.decoder, self.pool = fn, decoder, pool
        self.__name__ = getattr(fn, "__name__", "cook")
        for marker in ("__stateless__", "__restore_seeds__", "__failure_tolerance__"):
            if hasattr(fn, marker):
                setattr(self, marker, getattr(fn, marker))

    def _decoded(self, store: Any) -> Any:
        from ..cache.file_store import DecodeFileStore

        return store if self.decoder is None else DecodeFileStore(store, decoder=self.decoder)

    def __call__(self, raw: Any) -> Any:
        from ...blend.aux import AUX_KEY
        from ..cache.base import PrimaryFileStore
        from ..flavors.crude import CrudeSample

        context = raw.get(AUX_KEY) if isinstance(raw, dict) else None
        crude = CrudeSample({k: v for k, v in raw.items() if k != AUX_KEY}) if isinstance(raw, dict) else raw
        kwargs = {name: self._decoded(store) for name, store in (context.stores if context else {}).items()}
        if get_cooker_need_primary(self.fn):
            primary = context.primary if context is not None else None
            if primary is None:
                raise OptionError(
                    f"cooker {self.__name__!r} needs the primary dataset (need_primary=True): datareel gives it to "
                    f"crude WebDatasets read through a metadataset leaf with aux:, which this sample's dataset is not"
                )
            kwargs["primary"] = PrimaryFileStore(self._decoded(primary), current_key=crude["__key__"])
        if get_cooker_need_cache(self.fn):
            if self.pool is None:
                raise OptionError(
                    f"cooker {self.__name__!r} needs a cache pool (need_cache=True): pass cache_pool= (e.g. "
                    f"FileStoreCachePool(...) or NoCachePool()) to get_savable_loader / get_loader"
                )
            kwargs["cache"] = self.pool
        return self.fn(crude, **kwargs)


@dataclasses.dataclass
class BoundCooker(Cooker[T_sample]):
    """A :class:`Cooker` whose ``cook`` takes the crude sample alone (its stores bound by :func:`bind_cookers`);
    ``original`` is the cook function as given."""

    original: Callable[..., T_sample] | None = None

    @property
    def need_primary(self) -> bool:  # bound: it needs nothing more than the crude sample
        return False

    @property
    def need_cache(self) -> bool:
        return False


def bind_cookers(task_encoder: Any, cache_pool: Any = None) -> None:
    """Give ``task_encoder``'s cookers their stores and the loader's ``cache_pool`` (also its ``cache``):
    the instance's ``cookers`` become :class:`BoundCooker` s (its class is left as it is).  Called once per
    loader, before the encoder is resolved; an encoder without cookers is left alone."""
    if task_encoder is None:
        return
    inner = getattr(task_encoder, "_task_encoder", None)
    if isinstance(getattr(type(task_encoder), "cookers", None), property) and inner is not None:
        bind_cookers(inner, cache_pool)  # an AugmentTaskEncoder forwards its cookers
        vars(task_encoder)["_datareel_cache_pool"] = cache_pool
        return
    cookers = list(getattr(task_encoder, "cookers", None) or ())
    vars(task_encoder)["_datareel_cache_pool"] = cache_pool
    if not cookers:
        return
    from ..flavors.webdataset.sample_decoder import DEFAULT_DECODER, as_sample_decoder, user_decoder

    # the encoder's decoder (megatron.energon's read by its configuration), else Energon's default SampleDecoder()
    decoder = as_sample_decoder(user_decoder(task_encoder, DEFAULT_DECODER))
    bound = []
    for c in cookers:
        fn = c.original if isinstance(c, BoundCooker) else c.cook
        bound.append(BoundCooker(_Cook(fn, decoder, cache_pool), c.has_subflavors, original=fn))
    vars(task_encoder)["cookers"] = bound


def basic_sample_keys(crude_sample: dict[str, Any], additional_source_info: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The base fields (``__key__``, ``__restore_key__``, ``__subflavors__``, ``__sources__``) of a crude
    sample, to pass on to the cooked one."""
    out = {f.name: crude_sample[f.name] for f in dataclasses.fields(Sample) if f.name in crude_sample}
    if additional_source_info:
        out["__sources__"] = (*(crude_sample.get("__sources__") or ()), *additional_source_info)
    return out
