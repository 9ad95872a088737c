"""Module attributes imported on first use (PEP 562): one ``__getattr__`` / ``__dir__`` pair for every package
whose ``__init__`` names more than it imports (``datareel``, ``datareel.sources``, the formats, the Energon
facade's ``datareel.energon`` and ``.flavors``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_names(
    package: str, namespace: MutableMapping[str, Any], table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose globals are ``namespace``: a name in ``table``
    (name -> module, relative to ``package``) is imported at its first use and kept in ``namespace``, so the
    next access is a plain attribute; any other name is an ``AttributeError`` naming the package."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
