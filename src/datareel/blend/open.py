"""``datareel.open_dataset``: one entry point for every dataset format (:data:`datareel.formats.FORMATS` says
which one a path is; :mod:`datareel.storage`, where its bytes are)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import OptionError
from ..formats import METADATASET, format_of
from ..plan.over_epochs import check_multiplier
from ..sources.base import Source
from ..sources.view import SourceView
from ..storage.path import as_path
from .metadataset import load_metadataset

if TYPE_CHECKING:
    from .tree import Blend


def open_dataset(
    path: str | os.PathLike,
    *,
    split: str = "train",
    image_decode: str | None = "torchrgb",
    decode: bool | str = True,
    subflavors: dict[str, Any] | None = None,
    name: str | None = None,
    split_config: str = "split.yaml",
    dataset_config: str = "dataset.yaml",
    shuffle_over_epochs_multiplier: int | None = 1,
    trust_dataset_code: bool = False,
) -> Source | Blend:
    """Open a prepared dataset.

    - a directory prepared by ``datareel prepare`` or ``energon prepare``
      (tar shards, ``*.tar.idx``, ``.nv-meta/``): the given ``split``;
    - a ``.jsonl`` file with its ``.jsonl.idx``;
    - an Energon metadataset ``.yaml``: a blend (see :mod:`datareel.metadataset`).

    ``image_decode`` picks the image type (``"torchrgb"``: float CHW tensor, as
    Energon; ``"pil"``; ``"rgb8"``: uint8 HWC numpy; ``None``: bytes);
    ``decode=False`` keeps every part as bytes; pickle parts stay bytes and ``.pth`` loads
    tensors only unless ``decode="trusted"`` (unpickling runs code from the dataset).
    ``trust_dataset_code=True`` runs a ``dataset.yaml``'s ``sample_loader`` (Python in the dataset folder,
    :mod:`datareel.sources.dataset_code`); without it such a dataset is refused.
    ``name`` keys the shuffle and goes into checkpoints. A prepared directory's default is its split
    and a digest of its layout in ``.nv-meta`` (``train@3f0c9a51d2e47b86``: shard paths, counts, excluded
    keys, not the bytes; see :mod:`datareel.formats.webdataset.naming`), the same for every copy wherever it
    lives and for other datasets of the same layout: name those (a blend of them is refused). A checkpoint
    saved before that rule (``ds/train``: the folder and split) continues with ``name="ds/train"``.

    Example::

        >>> ds = datareel.open_dataset("/data/coco-wds", split="train", image_decode="pil")  # doctest: +SKIP
        >>> ds.read(0)["__key__"]                                                           # doctest: +SKIP
        '000000000009'
    """
    try:
        multiplier = check_multiplier(shuffle_over_epochs_multiplier)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    p = as_path(path)
    found = format_of(p)  # the first of datareel.formats.FORMATS that detects p
    extra = {"shuffle_over_epochs_multiplier": multiplier} if found is METADATASET and multiplier != 1 else {}
    opener = _open_metadataset if found is METADATASET else found.open
    if opener is None:  # register_format refuses one; a format put into FORMATS by hand may have none
        raise OptionError(f"{p} is a {found.name!r} dataset, and that format has no open(path, ...) to open it")
    dataset = opener(
        p,
        split=split,
        image_decode=image_decode,
        decode=decode,
        subflavors=subflavors,
        name=name,
        split_config=split_config,
        dataset_config=dataset_config,
        trust_dataset_code=_trust(trust_dataset_code),
        **extra,
    )
    if multiplier == 1 or extra:
        return dataset
    if not isinstance(dataset, Source):
        raise OptionError(
            f"shuffle_over_epochs_multiplier={multiplier!r}: {p} opens as a blend ({found.name}) that does not "
            f"take it; set it on its datasets"
        )
    shuffle, epochs = (False, 1) if multiplier is None else (None, multiplier)
    return SourceView(dataset, shuffle=shuffle, over_epochs=epochs)


def _trust(value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"trust_dataset_code={value!r} must be True (run a dataset.yaml's sample_loader.py) or False")
    return value


def _open_metadataset(
    path: Any,
    *,
    split: str,
    image_decode: str | None,
    decode: bool | str,
    trust_dataset_code: bool,
    shuffle_over_epochs_multiplier: int | None = 1,
    subflavors: dict[str, Any] | None = None,
    **ignored: Any,
) -> Source | Blend:
    """Split ``split`` of the metadataset at ``path`` as a blend. Its entries name their own splits and configs:
    ``name``, ``split_config`` and ``dataset_config`` do not apply (as ever); ``subflavors`` are the outermost,
    over every entry's (Energon's rule); ``shuffle_over_epochs_multiplier`` multiplies each dataset's own."""
    return load_metadataset(
        path,
        split=split,
        image_decode=image_decode,
        decode=decode,
        shuffle_over_epochs_multiplier=shuffle_over_epochs_multiplier,
        trust_dataset_code=trust_dataset_code,
        subflavors=subflavors,
    )
