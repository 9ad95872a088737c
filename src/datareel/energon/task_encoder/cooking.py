"""Cookers (``megatron.energon.task_encoder.cooking``'s names): turn crude samples into typed ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ...sources.typed import Sample

T_sample = TypeVar("T_sample")
F = TypeVar("F", bound=Callable[..., Any])


def cooker(fn: F | None = None, *, need_cache: bool = False, need_primary: bool = False) -> Any:
    """Marks a cook function (``need_cache`` / ``need_primary`` auxiliary data is refused when the
    loader starts: datareel's cookers get the crude sample only)."""
    if fn is None:
        return lambda f: cooker(f, need_cache=need_cache, need_primary=need_primary)
    fn.__cooker_need_cache__ = need_cache  # type: ignore[attr-defined]
    fn.__cooker_need_primary__ = need_primary  # type: ignore[attr-defined]
    return fn


@dataclasses.dataclass
class Cooker(Generic[T_sample]):
    """Turns a crude sample (a dict) into a typed one: ``cook(crude) -> sample``, for crude samples whose
    ``__subflavors__`` hold every item of ``has_subflavors`` (``None``: every crude sample)."""

    cook: Callable[..., T_sample]
    has_subflavors: dict[str, Any] | None = None

    @property
    def need_primary(self) -> bool:
        return bool(getattr(self.cook, "__cooker_need_primary__", False))

    @property
    def need_cache(self) -> bool:
        return bool(getattr(self.cook, "__cooker_need_cache__", False))

    def is_match(self, subflavors: dict[str, Any] | None) -> bool:
        subflavors = subflavors or {}
        return all(k in subflavors and subflavors[k] == v for k, v in (self.has_subflavors or {}).items())


def basic_sample_keys(crude_sample: dict[str, Any], additional_source_info: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The base fields (``__key__``, ``__restore_key__``, ``__subflavors__``, ``__sources__``) of a crude
    sample, to pass on to the cooked one."""
    out = {f.name: crude_sample[f.name] for f in dataclasses.fields(Sample) if f.name in crude_sample}
    if additional_source_info:
        out["__sources__"] = (*(crude_sample.get("__sources__") or ()), *additional_source_info)
    return out
