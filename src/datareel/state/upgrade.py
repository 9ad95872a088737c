"""Specs written by older releases of format version 1, read as today's (:func:`upgrade`).

Two fields changed shape without a new version, each accepted by what the older release compared, with a
warning that the rest could not be verified:

- datareel 0.1.0 named a packing length function by its bare ``__qualname__``; today it is
  ``{"function": qualname, "module": module, "lengths": digest}``.  Such a state restores when the
  qualified names are equal (as 0.1.0 required) and every other packing option is too.
- States written before ``from_sequence`` sources had a content digest (datareel 0.1.0 and 0.2) have no
  ``dataset.content``: such a state restores when every other field of its dataset fingerprint is equal.

Everything else is compared as written; ``tests/state/test_golden_state.py`` pins both cases.
"""

from __future__ import annotations

import logging
from typing import Any

from .spec import Spec

log = logging.getLogger("datareel")


def upgrade(saved: Spec, current: Spec) -> Spec:
    """``saved`` with the fields an older release wrote in another shape replaced by ``current``'s, where
    they match as that release compared them (see the module doc); otherwise ``saved`` unchanged."""
    old, new = saved.to_json(), current.to_json()
    upgraded = upgrade_json(old, new)
    return saved if upgraded == old else Spec.from_json(upgraded, check=False)


def upgrade_json(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """:func:`upgrade` on the specs' JSON."""
    saved = _upgrade_content(saved, current)
    old, new = saved.get("packing"), current.get("packing")
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return saved
    length, now = old.get("length"), new.get("length")
    if isinstance(length, str) and length not in ("index", "bytes") and isinstance(now, dict):
        if now.get("function") == length and {**old, "length": now} == new:
            log.warning(
                "this checkpoint predates length-function digests: packing length %r is accepted by "
                "name, but datareel cannot verify that the function still returns the same lengths",
                length,
            )
            return {**saved, "packing": new}
    return saved


def _upgrade_content(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A spec without ``dataset.content`` where ``current`` has one (see the module doc)."""
    old, new = saved.get("dataset"), current.get("dataset")
    if not (isinstance(old, dict) and isinstance(new, dict)) or "content" in old or "content" not in new:
        return saved
    if {**old, "content": new["content"]} != new:
        return saved
    log.warning(
        "this checkpoint predates content digests of from_sequence datasets: dataset %r is accepted by name "
        "and size, but datareel cannot verify that the sequence still holds the same items",
        new.get("name"),
    )
    return {**saved, "dataset": new}
