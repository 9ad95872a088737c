"""The JSON values a state may hold: the bounds checked before anything in a state is read, and a read-only form.

A state comes from a file, so before any field is compared or resolved it must be a tree of JSON values
(dicts with string keys, lists, strings, numbers, booleans, null) at most :data:`MAX_DEPTH` deep, of at most
:data:`MAX_NODES` values, strings of at most :data:`MAX_STRING` characters, integers below ``2^64`` and finite
floats (:func:`check_bounds`: iterative, and it stops at the first value past a bound, so O(MAX_NODES) at most).

:func:`freeze` turns such a tree into a read-only one (dicts to ``MappingProxyType``, lists to tuples; key
order kept) so that a frozen :class:`~datareel.state.spec.Spec` holds no mutable dict; :func:`thaw` gives the
JSON back (``thaw(freeze(x)) == x`` for JSON ``x``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import StateDamagedError, brief
from ..plan.rampup import MAX_SCHEDULE_PIECES

MAX_DEPTH = 16
"""Containers a state may nest (a schedule's pieces are the deepest written: 7)."""
MAX_NODES = 4 * MAX_SCHEDULE_PIECES + 10_000
"""Values a state may hold (a piecewise schedule of the most pieces, three values each, and the rest)."""
MAX_STRING = 4096
"""Characters a string (or key) of a state may hold (names are cut to 80; module paths are short)."""


def check_bounds(value: Any, where: str = "") -> None:
    """Refuse (:class:`StateDamagedError`) a ``value`` that is not a bounded tree of JSON values (the limits
    in the module doc), naming the first value past a bound by its path from ``where`` (``""``: the state)."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        name = where or "the state"
        if nodes > MAX_NODES:
            raise StateDamagedError(
                f"state holds more than {MAX_NODES:,} values (at {name}); a datareel state is small (its size does "
                f"not grow with the dataset or the run): the file is damaged or not a datareel state"
            )
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            if not -(1 << 64) < value < 1 << 64:
                raise StateDamagedError(f"state {name}={brief(value)} is beyond 64 bits; the state is damaged")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise StateDamagedError(f"state {name}={value} is not a finite number; the state is damaged")
        elif isinstance(value, str):
            if len(value) > MAX_STRING:
                raise StateDamagedError(
                    f"state {name} is a string of {len(value):,} characters (at most {MAX_STRING:,}); the state "
                    f"is damaged"
                )
        elif isinstance(value, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise StateDamagedError(
                    f"state {name} is nested deeper than {MAX_DEPTH} levels; a datareel state is shallow: the "
                    f"state is damaged"
                )
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str) or len(key) > MAX_STRING:
                        raise StateDamagedError(
                            f"state {name} has the key {brief(key)}: keys are strings (JSON); the state is damaged"
                        )
                    stack.append((item, f"{where}.{key}" if where else key, depth + 1))
            else:
                if len(value) > MAX_NODES:
                    raise StateDamagedError(f"state {name} is a list of {len(value):,} values; the state is damaged")
                stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            raise StateDamagedError(
                f"state {name} is a {type(value).__name__}: a state holds JSON values only (dicts, lists, "
                f"strings, numbers, booleans, null); the state is damaged"
            )


def freeze(value: Any) -> Any:
    """``value`` read-only: each dict a ``MappingProxyType`` (key order kept), each list or tuple a tuple."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON form of a :func:`freeze` d value: mappings to dicts, tuples to lists."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    return value
