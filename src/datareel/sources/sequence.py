"""A source over any Python sequence: lists, numpy arrays, HF datasets, torch map-style datasets."""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .base import Source


class SequenceSource(Source):
    """Wraps an object with ``__len__`` and ``__getitem__(int)``."""

    def __init__(self, seq: Any, *, name: str | None = None):
        if not (hasattr(seq, "__len__") and hasattr(seq, "__getitem__")):
            raise OptionError(
                f"from_sequence needs an object with __len__ and __getitem__, got "
                f"{type(seq).__name__}; wrap an iterable with list(...) first, or use "
                f"datareel.open_dataset for files"
            )
        size = len(seq)
        if size < 1:
            raise OptionError(
                f"from_sequence got an empty {type(seq).__name__} (len 0); a dataset needs at least one sample"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise OptionError(f"name={name!r} must be a non-empty string or None")
        self.seq = seq
        self.name = name if name is not None else "sequence"
        self._size = size

    def __len__(self) -> int:
        return self._size

    def read(self, index: int) -> Any:
        return self.seq[int(index)]


def from_sequence(seq: Any, *, name: str | None = None) -> SequenceSource:
    """Make a dataset of any sequence.

    ``seq`` needs ``len(seq)`` and ``seq[i]``: a list, a numpy array (rows are
    samples), a Hugging Face ``datasets.Dataset``, a map-style
    ``torch.utils.data.Dataset``.  ``name`` (default ``"sequence"``) keys the
    shuffle and goes into checkpoints, so two sources in one run need two
    names, and renaming a source invalidates its checkpoints.

    Example::

        >>> import datareel
        >>> ds = datareel.from_sequence([{"text": "a"}, {"text": "b"}], name="toy")
        >>> len(ds), ds.read(1)
        (2, {'text': 'b'})
    """
    return SequenceSource(seq, name=name)
