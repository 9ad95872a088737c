"""A collated micro-batch split back into one record per sample (what the checkers of this package compare).

A batch is whatever the task encoder's ``batch`` / ``encode_batch`` made of the micro-batch's ``n`` samples
(packs): by default ``torch.utils.data.default_collate``'s shapes, or any structure a ``batch`` of the user's
(or Energon's) returns. :func:`split_rows` inverts both, structure by structure:

- a tensor or numpy array with ``n`` rows (dim 0): its rows (as nested lists);
- a mapping (the batch itself; a collated dict column, such as a ``.json`` part's): one dict per sample, each
  key split (a ``__meta__`` key's list of ``n``: entry ``i`` is sample ``i``'s);
- a dataclass or a namedtuple (Energon's batch types; a collated namedtuple): one dict of its fields per sample;
- a list or tuple that is a *column*: ``n`` strings (default_collate's column of strings), or entries that
  are each a column (how ``default_collate`` transposes a per-sample list or tuple: sample ``i`` gets the
  ``i``-th row of every entry; an empty one gives ``[]`` to every sample);
- any other list or tuple of ``n`` entries (numbers, dicts, ``None``, variable-size tensors: a column a
  ``batch`` lists): entry ``i`` is sample ``i``'s;
- ``None``: ``None`` for every sample (it carries nothing to split);
- anything else (a string, a number, a 0-d tensor, a tensor or list of another length): one value for the
  whole micro-batch that no sample owns, which cannot be compared across topologies: a
  :class:`~datareel.errors.DatareelError` names the field, its value and what would work.

A list or tuple of exactly ``n`` entries that are each columns of ``n`` could be either. ``collated=True``
(the batch came from the default collation) reads it as transposed. ``collated=False`` (a ``batch`` of the
encoder's own) reads a list as one entry per sample (as Energon's batches list them) and a tuple as fields
(``(images, captions)``), its entries then columns of ``n`` entries of any kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..errors import DatareelError, brief


def to_python(value: Any) -> Any:
    """Tensors and arrays to nested lists, dataclasses and namedtuples to dicts of their fields, mappings and
    sequences element by element; everything else as is (for equality checks)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {k: to_python(v) for k, v in value.items()}
    named = _fields(value)
    if named is not None:
        return {k: to_python(v) for k, v in named.items()}
    if isinstance(value, list | tuple):
        return [to_python(v) for v in value]
    return value


def split_rows(value: Any, count: int, path: str = "batch", *, collated: bool = True) -> list[Any]:
    """``value`` (a micro-batch of ``count`` samples, or a field of one) as ``count`` per-sample values (see the
    module doc); a :class:`~datareel.errors.DatareelError` names ``path`` where a field cannot be split."""
    if value is None:
        return [None] * count
    if isinstance(value, torch.Tensor | np.ndarray):
        if value.ndim >= 1 and len(value) == count:
            return value.tolist()
        raise _cannot(path, value, count)
    named = dict(value) if isinstance(value, Mapping) else _fields(value)
    if named is not None:
        where = "{}[{!r}]" if isinstance(value, Mapping) else "{}.{}"
        columns = {}
        for key, item in named.items():
            meta = isinstance(key, str) and key.startswith("__") and key.endswith("__")
            listed = meta and isinstance(item, list | tuple) and len(item) == count  # meta keys are listed
            columns[key] = (
                [to_python(v) for v in item]
                if listed
                else split_rows(item, count, where.format(path, key), collated=collated)
            )
        return [{k: column[i] for k, column in columns.items()} for i in range(count)]
    if isinstance(value, list | tuple):
        listed = len(value) == count
        if listed and not collated and isinstance(value, list):  # a batch's own list: one entry per sample
            return [to_python(v) for v in value]
        rows = _column(value, count, lenient=not collated)  # a tuple of fields first, as (images, captions)
        if rows is not None:
            return rows
        if listed:
            return [to_python(v) for v in value]
    raise _cannot(path, value, count)


def _column(value: Any, count: int, lenient: bool) -> list[Any] | None:
    """``value``'s rows if it is a column of ``count``, else ``None``: a tensor or array of that many rows; a list
    of that many strings (``lenient``: of that many entries of any kind, as a ``batch`` of the encoder's own
    lists them); a list or tuple, mapping, dataclass or namedtuple of such columns (how ``default_collate``
    transposes them). ``None`` and single values are no column; nor, under the default collation, are lists of
    numbers (it makes tensors of them)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return value.tolist() if value.ndim >= 1 and len(value) == count else None
    named = dict(value) if isinstance(value, Mapping) else _fields(value)
    if named is not None:
        columns = {k: _column(v, count, lenient) for k, v in named.items()}
        if not columns or any(column is None for column in columns.values()):
            return None
        return [{k: column[i] for k, column in columns.items()} for i in range(count)]  # type: ignore[index]
    if isinstance(value, list | tuple):
        listed = bool(value) and len(value) == count
        if listed and (lenient and isinstance(value, list) or all(isinstance(v, str | bytes) for v in value)):
            return [to_python(v) for v in value]
        entries = [_column(v, count, lenient) for v in value]  # a tuple: its fields first
        if all(entry is not None for entry in entries):
            return [[entry[i] for entry in entries] for i in range(count)]  # type: ignore[index]
        return [to_python(v) for v in value] if listed and lenient else None
    return None


def _fields(value: Any) -> dict[str, Any] | None:
    """A dataclass instance's or a namedtuple's fields by name; ``None`` for anything else."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and isinstance(getattr(value, "_fields", None), tuple):
        return dict(zip(value._fields, value))  # type: ignore[attr-defined]
    return None


def _cannot(path: str, value: Any, count: int) -> DatareelError:
    if isinstance(value, torch.Tensor | np.ndarray):
        what = f"a {type(value).__name__} of shape {tuple(value.shape)}"
    elif isinstance(value, list | tuple):
        what = f"a {type(value).__name__} of {len(value)} entries, not each a column of {count}"
    else:
        what = f"{brief(value, 60)} ({type(value).__name__})"
    return DatareelError(
        f"cannot split field {path} of a micro-batch of {count} samples into one value per sample: it is {what}, "
        f"one value for the whole micro-batch that no sample owns (its value depends on which samples share a "
        f"micro-batch, so it cannot be compared across topologies). Give that field per sample (a tensor or "
        f"array with the samples along dim 0, a list or tuple with one entry per sample), or leave it out of the "
        f"batch the check runs (a task encoder whose encode_batch drops it)"
    )
