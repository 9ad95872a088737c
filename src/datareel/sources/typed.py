"""Typed samples: dataclasses with Energon's class and field names, built by typed datasets.

A dataset whose ``dataset.yaml`` names a ``sample_type`` yields instances of the
class of that name (``CaptioningSample(image=..., caption=...)``), so task
encoders dispatch with ``isinstance``.  Every typed sample carries

- ``__key__``: the sample's key in its shard;
- ``__restore_key__``: ``("Webdataset", shard, index in shard)``: enough to read it again;
- ``__subflavors__``: the dataset's subflavors (``{}`` when it has none);
- ``__sources__``: the :class:`~datareel.sources.source_info.SourceInfo` records of the reads that made
  it where the source keeps them (crude samples of a leaf with ``aux:``, and what cookers read), else ``None``.

The classes are slotted, keyword-only dataclasses, like Energon's; subclass them
with ``@dataclasses.dataclass`` to add fields.  ``sample["caption"]`` reads a
field too, so code written for dict samples keeps working.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..errors import DatasetError

T = TypeVar("T")


def edataclass(cls: type[T]) -> type[T]:
    """``@dataclass(slots=True, kw_only=True)``: how Energon declares its samples and batches."""
    return dataclasses.dataclass(slots=True, kw_only=True)(cls)


class _Fields:
    """Helpers shared by samples and batches (Energon's names)."""

    __slots__ = ()

    @classmethod
    def extend(cls, src: Any, **kwargs: Any) -> Any:
        """A ``cls`` with ``src``'s fields and the new ``kwargs`` (``cls`` must subclass ``type(src)``)."""
        for field in dataclasses.fields(src):
            if field.init and field.name not in kwargs:
                kwargs[field.name] = getattr(src, field.name)
        return cls(**kwargs)

    def pin_memory(self) -> Any:
        """A copy with every tensor (also inside lists, tuples and dicts) in pinned memory."""
        return _pin(self)


def _pin(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if isinstance(value, dict):
        return {k: _pin(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value)(**{f.name: _pin(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_pin(v) for v in value)
    return value


@edataclass
class Sample(_Fields):
    """The base of every typed sample (``megatron.energon.Sample``'s fields)."""

    __key__: str
    __restore_key__: tuple[Any, ...] = ()
    __subflavors__: dict[str, Any] | None = None
    __sources__: tuple[Any, ...] | None = None

    def __getitem__(self, name: str) -> Any:
        """``sample["caption"]`` is ``sample.caption`` (code written for dict samples keeps working)."""
        if not isinstance(name, str) or name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.__dataclass_fields__

    @classmethod
    def derive_from(cls, base_sample: Any, **kwargs: Any) -> Any:
        """A ``cls`` with ``base_sample``'s ``__key__``, ``__restore_key__``, ``__subflavors__`` and
        ``__sources__`` and the given fields."""
        for field in dataclasses.fields(Sample):
            kwargs.setdefault(field.name, getattr(base_sample, field.name, None))
        return cls(**kwargs)

    @classmethod
    def from_joined(cls, *args: Any, **kwargs: Any) -> Any:
        """Energon's default join (``join:`` in a metadataset): the primary sample's key, restore key and
        subflavors, then each joined sample's fields in order, later ones winning; override it to join
        otherwise.  See :func:`default_from_joined`."""
        return default_from_joined(cls, *args, **kwargs)


def sample_joiner(cls: type) -> Callable[..., Any]:
    """The joiner of a sample class: its own ``from_joined``, else :func:`default_from_joined` for it."""
    own = getattr(cls, "from_joined", None)
    if own is not None and getattr(own, "__func__", None) is not Sample.from_joined.__func__:
        return own
    return _DefaultJoin(cls)


class _DefaultJoin:
    """Energon's default ``Sample.from_joined`` for ``cls`` (picklable: DataLoader workers get a copy)."""

    def __init__(self, cls: type):
        self.cls = cls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return default_from_joined(self.cls, *args, **kwargs)


def default_from_joined(cls: type, *args: Any, **kwargs: Any) -> Any:
    """Energon's default join into ``cls``: the primary's fields (key, restore key, subflavors), then each
    sample's own fields in order (later ones win); ``__sources__`` the primary's followed by every
    sample's (the primary's among them, as Energon's).  Positional samples only, as Energon's."""
    if kwargs:
        raise DatasetError(
            f"{cls.__name__} has no from_joined of its own, and the default joins a join: list only (a mapping's "
            f"names would be ignored); write the join as a list, or give {cls.__name__} a from_joined"
        )
    base = {f.name for f in dataclasses.fields(Sample)}
    init: dict[str, Any] = {}
    if args:
        primary = args[0]
        if primary is None:
            raise DatasetError("the primary sample of a join is None; only secondaries may be missing")
        init = {f.name: getattr(primary, f.name) for f in dataclasses.fields(primary)}
        init["__sources__"] = (
            *(primary.__sources__ or ()),
            *(s for arg in args if arg is not None and arg.__sources__ is not None for s in arg.__sources__),
        )
        for arg in args:
            if arg is not None:
                init.update({f.name: getattr(arg, f.name) for f in dataclasses.fields(arg) if f.name not in base})
    return cls(**init)


@edataclass
class TextSample(Sample):
    text: str


@edataclass
class CaptioningSample(Sample):
    image: Any
    caption: str


@edataclass
class ImageSample(Sample):
    image: Any


@edataclass
class ImageClassificationSample(Sample):
    image: Any
    label: int | None = None
    label_name: str | None = None


@edataclass
class InterleavedSample(Sample):
    sequence: list[Any]


@edataclass
class MultiChoiceVQASample(Sample):
    image: Any
    context: str
    choices: list[str] | None = None
    correct_choice_idx: int = 0


@edataclass
class OCRSample(Sample):
    image: Any
    text: str
    block_boxes: Any = None
    block_classes: Any = None
    block_text: list[str] | None = None
    lines_boxes: Any = None
    lines_text: list[str] | None = None
    words_boxes: Any = None
    words_text: list[str] | None = None
    chars_boxes: Any = None
    chars_text: list[str] | None = None


@edataclass
class SimilarityInterleavedSample(Sample):
    images: list[Any]
    texts: list[str]
    audio: list[Any] | None = None
    video: list[Any] | None = None
    similarity_matrix: Any = None
    matched_text_indices: list[int] | None = None


@edataclass
class VQASample(Sample):
    image: Any
    context: str
    answers: list[str] | None = None
    answer_weights: Any = None


@edataclass
class VQAOCRSample(Sample):
    image: Any
    context: str
    text: str
    answers: list[str] | None = None
    answer_weights: Any = None
    words_boxes: Any = None
    words_text: list[str] | None = None


@edataclass
class VidQASample(Sample):
    video: Any
    context: str
    answers: list[str] | None = None
    answer_weights: Any = None


SAMPLE_CLASSES: dict[str, type[Sample]] = {
    cls.__name__: cls
    for cls in (
        TextSample,
        CaptioningSample,
        ImageSample,
        ImageClassificationSample,
        InterleavedSample,
        MultiChoiceVQASample,
        OCRSample,
        SimilarityInterleavedSample,
        VQASample,
        VQAOCRSample,
        VidQASample,
    )
}
"""Every typed sample class by name (what ``sample_type.__class__`` in ``dataset.yaml`` names)."""

_BASE = frozenset(f.name for f in dataclasses.fields(Sample))


def type_fields(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(required, optional)`` data fields of sample type ``name`` (the base fields left out)."""
    fields = [f for f in dataclasses.fields(SAMPLE_CLASSES[name]) if f.name not in _BASE]
    required = tuple(f.name for f in fields if f.default is dataclasses.MISSING)
    return required, tuple(f.name for f in fields if f.default is not dataclasses.MISSING)
