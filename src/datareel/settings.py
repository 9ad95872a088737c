"""Every ``DATAREEL_*`` environment variable datareel reads, in one registry (:data:`SETTINGS`): its name, its
default, what it sets, and the check that reads it (each owner module's own parser, so a value means the
same here as where it is used).

The variables are read where they are used, in each process (a DataLoader worker inherits the training
process's environment), and several of those places are hints (prefetching, fetching ahead, the node
cache) that must not fail a batch.  So a bad value is found **up front** instead: :func:`check_environment`
runs every check when a Loader is made (:func:`datareel.pipeline.build`), in the training process, and one
:class:`~datareel.errors.OptionError` names each bad variable, its value, the rule and the fix, before any
batch is made.  docs/operating.md lists the variables; ``tests/execute/test_settings.py`` sets each one
(from this registry) to a value it refuses, and fails for a ``DATAREEL_*`` name in ``src`` that is not here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from .errors import OptionError


@dataclass(frozen=True)
class Setting:
    """One environment variable: ``check`` (``"module:function"``, called with no argument) reads it and
    raises :class:`OptionError` for a bad value; ``refused`` is one such value (for the docs and tests)."""

    name: str
    default: str
    meaning: str
    check: str
    refused: str = "lots"

    def checker(self) -> Callable[[], object]:
        module, _, function = self.check.partition(":")
        found: object = importlib.import_module(module)
        for part in function.split("."):
            found = getattr(found, part)
        return found  # type: ignore[return-value]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DATAREEL_MAX_OPEN_SHARDS",
        "a quarter of `ulimit -n`, at most 1024",
        "shards (and JSONL files) one reading process keeps open at a time, across all sources",
        "datareel.storage.handles:max_open",
    ),
    Setting(
        "DATAREEL_BLOCK_CACHE_BYTES",
        "268435456 (256 MiB)",
        "bytes of raw samples each process keeps from the blocks it read (BlockShuffle); 0 keeps none",
        "datareel.formats.webdataset.kept:cache_limit",
    ),
    Setting(
        "DATAREEL_LOOKAHEAD_BYTES",
        "67108864 (64 MiB)",
        "bytes of blocks each process fetches ahead from a bucket (BlockShuffle); 0 turns the lookahead off",
        "datareel.formats.webdataset.ahead:configured_limit",
    ),
    Setting(
        "DATAREEL_NODE_CACHE",
        "`<tempdir>/datareel-blocks-<uid>`",
        "the node-local directory of blocks read from buckets, shared by the node's processes; `off`: none",
        "datareel.storage.node_cache:check_directory",
        refused="/dev/null",
    ),
    Setting(
        "DATAREEL_NODE_CACHE_BYTES",
        "4294967296 (4 GiB)",
        "the node cache directory's limit in bytes",
        "datareel.storage.node_cache:limit",
    ),
    Setting(
        "DATAREEL_MAX_DECOMPRESSED",
        "1GiB",
        "bytes one compressed part (`.gz`, `npz`, `pth`) may unpack to; e.g. `4GiB`",
        "datareel.formats.webdataset.compress:decompression_limit",
    ),
    Setting(
        "DATAREEL_REMOTE_ATTEMPTS",
        "6",
        "tries of one request to a store (1 to 100)",
        "datareel.storage.retry:Retry.from_env",
    ),
    Setting(
        "DATAREEL_REMOTE_TIMEOUT",
        "10 s to connect, 30 s per read",
        "seconds one request waits to connect and for each read of its answer (sets both)",
        "datareel.storage.retry:Retry.from_env",
    ),
    Setting(
        "DATAREEL_REMOTE_DEADLINE",
        "120",
        "seconds one read from a store may take in all, tries and waits included; `none`: no deadline",
        "datareel.storage.retry:Retry.from_env",
    ),
    Setting(
        "DATAREEL_REMOTE_CONCURRENCY",
        "8",
        "ranged GETs one process keeps in flight for a micro-batch (1 to 256)",
        "datareel.storage.ranges:concurrency",
    ),
    Setting(
        "DATAREEL_S3_CLIENT",
        "obstore",
        "the client of `s3://` URLs: `obstore` or `msc` (multi-storage-client)",
        "datareel.storage.object_store:s3_client",
    ),
)
"""Every variable, in the order docs/operating.md lists them."""


def byte_count(name: str, default: int, meaning: str, *, least: int = 0, otherwise: str = "") -> int:
    """The whole number of bytes the variable ``name`` gives (``default`` where unset), or an
    :class:`OptionError` naming the value, the rule (at least ``least``), ``meaning``, the default and
    ``otherwise`` (another way to get what the user may have meant)."""
    text = os.environ.get(name)
    if text is None:
        return default
    digits = text.strip()
    if not (digits.isascii() and digits.isdecimal()) or int(digits) < least:  # not '²' nor '٣'
        at_least = f" >= {least}" if least else ""
        raise OptionError(
            f"{name}={text!r} must be a whole number of bytes{at_least} ({meaning}; default {default}){otherwise}"
        )
    return int(digits)


def problems(environ: dict[str, str] | None = None) -> list[str]:
    """What is wrong with the ``DATAREEL_*`` variables set now (each check's message, once each)."""
    env = os.environ if environ is None else environ
    found: list[str] = []
    for setting in SETTINGS:
        if setting.name not in env:
            continue
        try:
            setting.checker()()
        except OptionError as exc:
            if str(exc) not in found:
                found.append(str(exc))
    return found


def check_environment() -> None:
    """Raise one :class:`OptionError` naming every ``DATAREEL_*`` variable whose value datareel refuses (its
    name, value, rule and fix); nothing when all are good. The Loader calls it when it is made."""
    found = problems()
    if found:
        listed = "".join(f"\n  - {text}" for text in found)
        raise OptionError(
            f"{len(found)} datareel environment setting(s) cannot be used (checked when the Loader is made, "
            f"before any batch):{listed}\nfix or unset them (docs/operating.md lists every DATAREEL_* variable)"
        )
