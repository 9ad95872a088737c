"""Energon's ``megatron.energon.sample_utils``: text renderings of a sample for logs and error messages,
and the key lookup Energon's sample logging uses.

- :func:`format_sample_detailed` — a multi-line, YAML-shaped dump (PyYAML renders it): a dataclass as
  ``{ClassName: {field: ...}}``, a tuple as a list, a tensor or array as one summary line (shape, dtype,
  min, max and its values, or its first and last three), anything else by its ``repr``;
- :func:`format_sample_compact` — one line, cut at ``depth`` levels, ``max_items`` items and
  ``max_str_len`` characters, for inline use;
- :func:`default_get_batch_keys` — a batch's sample keys (``__key__``, ``__keys__`` or ``keys``).

Where datareel differs: :func:`default_get_batch_keys` answers ``None`` for an empty batch list and for
a key field that is not a list (Energon fails on the first and hands back a bare string for the second);
a dataclass *class* (not an instance) is rendered by its ``repr``, not read field by field.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import torch
import yaml

_SHOWN_AT_ENDS = 3
"""A tensor or array of more than twice this many values shows this many at each end."""
_DETAILED_DICT_ITEMS = 25
_DETAILED_LIST_ITEMS = 10
_DETAILED_STR_CHARS = 1000
_DETAILED_REPR_CHARS = 200
_KEY_FIELDS = ("__key__", "__keys__")


def _is_instance_of_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _values_text(count: int, ends: list[str]) -> str:
    """``values=[...]`` from the reprs ``ends``: every value when ``count`` is small, else the first and last
    few around ``...``."""
    if count <= 2 * _SHOWN_AT_ENDS:
        return f"values=[{', '.join(ends)}]"
    return f"values=[{', '.join(ends[:_SHOWN_AT_ENDS])}, ..., {', '.join(ends[_SHOWN_AT_ENDS:])}]"


def _tensor_line(value: torch.Tensor) -> str:
    described = f"Tensor(shape={value.shape}, dtype={value.dtype}, device={value.device}"
    try:
        low, high = value.min().item(), value.max().item()
        flat = value.flatten()
        count = flat.numel()
        if count > 2 * _SHOWN_AT_ENDS:
            flat = torch.cat([flat[:_SHOWN_AT_ENDS], flat[-_SHOWN_AT_ENDS:]])
        ends = [repr(v.item()) for v in flat]
    except (RuntimeError, ValueError):  # empty, complex, or on a device without values
        return described + ")"
    return f"{described}, min={low}, max={high}, {_values_text(count, ends)})"


def _array_line(value: np.ndarray) -> str:
    described = f"np.ndarray(shape={value.shape}, dtype={value.dtype}"
    try:
        low, high = value.min(), value.max()
    except (ValueError, TypeError):  # empty, or values without an order
        return described + ")"
    flat = value.ravel()
    if flat.size > 2 * _SHOWN_AT_ENDS:
        flat = np.concatenate([flat[:_SHOWN_AT_ENDS], flat[-_SHOWN_AT_ENDS:]])
    return f"{described}, min={low}, max={high}, {_values_text(value.size, [repr(v) for v in flat])})"


def _plain_key(key: Any) -> Any:
    return key if key is None or isinstance(key, (str, int, float, bool)) else repr(key)


def _plain(value: Any) -> Any:
    """``value`` as plain data PyYAML's safe dumper renders (dicts, lists, str, int, float, bool, None)."""
    if isinstance(value, torch.Tensor):
        return _tensor_line(value)
    if isinstance(value, np.ndarray):
        return _array_line(value)
    if _is_instance_of_dataclass(value):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {type(value).__name__: fields}
    if isinstance(value, dict):
        shown = {}
        for i, (key, item) in enumerate(value.items()):
            if i == _DETAILED_DICT_ITEMS:
                shown["..."] = f"and {len(value) - _DETAILED_DICT_ITEMS} more items"
                break
            shown[_plain_key(key)] = _plain(item)
        return shown
    if isinstance(value, (list, tuple)):
        items = [_plain(item) for item in value[:_DETAILED_LIST_ITEMS]]
        if len(value) > _DETAILED_LIST_ITEMS:
            items.append(f"... and {len(value) - _DETAILED_LIST_ITEMS} more items")
        return items
    if isinstance(value, str):
        if len(value) <= _DETAILED_STR_CHARS:
            return value
        return f"{value[:_DETAILED_STR_CHARS]}... (and {len(value) - _DETAILED_STR_CHARS} more characters)"
    if value is None or isinstance(value, (int, float, bool)):
        return value
    text = repr(value)
    return text if len(text) <= _DETAILED_REPR_CHARS else text[:_DETAILED_REPR_CHARS] + "..."


def format_sample_detailed(sample: Any, indent: str = "") -> str:
    """``sample`` as multi-line YAML-shaped text for debugging (no trailing newline); every non-empty line
    starts with ``indent``.  Dicts show their first 25 items, lists and tuples their first 10, strings their
    first 1000 characters; a tensor or an array is one line with its shape, dtype, min, max and values."""
    text: str = yaml.safe_dump(_plain(sample), sort_keys=False, default_flow_style=False, width=120).rstrip()
    text = text.removesuffix("\n...")  # the end-of-document marker PyYAML puts after a lone scalar
    if not indent:
        return text
    return "\n".join(indent + line if line else line for line in text.splitlines())


def format_sample_compact(sample: Any, depth: int = 3, max_items: int = 10, max_str_len: int = 50) -> str:
    """``sample`` on one line: containers nested deeper than ``depth`` shown as ``{...}``/``[...]``/``(...)``,
    at most ``max_items`` items of each, strings cut after ``max_str_len`` characters.  A dict value under a
    ``__``-prefixed key is shown by its ``repr``; other objects by their (cut) ``repr``, quoted."""

    def compact(value: Any, depth: int) -> str:
        if isinstance(value, dict):
            if depth <= 0:
                return "{...}"
            shown = [
                f"{k}: {v!r}" if isinstance(k, str) and k.startswith("__") else f"{k}: {compact(v, depth - 1)}"
                for k, v in itertools.islice(value.items(), max_items)
            ]
            return "{" + ", ".join(shown) + "}"
        if isinstance(value, (list, tuple)):
            opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
            if depth <= 0:
                return opening + "..." + closing
            return opening + ", ".join(compact(v, depth - 1) for v in value[:max_items]) + closing
        if isinstance(value, str):
            return repr(value[:max_str_len] + "...") if len(value) > max_str_len else repr(value)
        if isinstance(value, torch.Tensor):
            return f"Tensor(shape={value.shape}, dtype={value.dtype}, device={value.device})"
        if isinstance(value, np.ndarray):
            return f"np.ndarray(shape={value.shape}, dtype={value.dtype})"
        if _is_instance_of_dataclass(value):  # a dataclass does not use up a level (as in Energon)
            fields = ", ".join(f"{f.name}={compact(getattr(value, f.name), depth)}" for f in dataclasses.fields(value))
            return f"{type(value).__name__}({fields})"
        return compact(repr(value), depth)

    return compact(sample, depth)


def _string_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(k, str) for k in value):
        return value
    return None


def default_get_batch_keys(batch: Any) -> list[str] | None:
    """The sample keys of ``batch`` (of its first element when it is a list), or ``None``: the first list of
    strings found as attribute ``__key__`` or ``__keys__``, else as dict item ``__key__``, ``__keys__`` or
    ``keys``."""
    if isinstance(batch, list):
        if not batch:
            return None
        batch = batch[0]
    for name in _KEY_FIELDS:
        keys = _string_list(getattr(batch, name, None))
        if keys is not None:
            return keys
    if isinstance(batch, dict):
        for name in (*_KEY_FIELDS, "keys"):
            keys = _string_list(batch.get(name))
            if keys is not None:
                return keys
    return None


__all__ = ["default_get_batch_keys", "format_sample_compact", "format_sample_detailed"]
