"""The exception types datareel raises, and the argument checks that raise them.

Every error datareel raises on purpose derives from :class:`DatareelError`, so a
training script can catch them all with one clause.  Errors that are also a
wrong *value* derive from :class:`ValueError` too, so generic handlers keep
working:

- :class:`OptionError` — a bad argument (to ``Loader``, ``Packing``, ``mix``, ``filter``, ...);
- :class:`TopologyError` — batch sizes, world size or a cursor that cannot be laid out;
- :class:`StateError` — a saved state that cannot be restored: :class:`StateMismatchError` (another spec),
  :class:`StateDamagedError` (damaged), :class:`ForeignStateError` (not datareel's, or another version);
  :class:`StateVersionError` and :class:`StateCheckError` are also mismatches, as they were before the family;
- :class:`DatasetError` — a problem with data on disk (missing shard, stale index, bad tar);
- :class:`StorageError` — the machine or the store failed, not the sample (too many open files, an
  I/O error, retries run out, a listed file missing); :func:`sample_failure` tells the two apart;
- :class:`BatchError` — making one micro-batch failed (in a worker);
- :class:`SampleContextError` — a per-sample helper called outside a sample.

Messages give the value, the rule it breaks, and the fix.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np


class DatareelError(Exception):
    """Root of every error datareel raises on purpose."""


class OptionError(DatareelError, ValueError):
    """An argument datareel cannot accept, e.g. ``Packing(max_length=0)`` or ``on_error="skip"``."""


class DatasetError(DatareelError):
    """Data on disk that cannot be read as it is: a missing shard, a stale index, a damaged tar."""


class DuplicateSampleKeyError(DatasetError, RuntimeError):
    """Two samples of one dataset have the same key (``sample_key``); ``first`` and ``second`` are their
    ``(tar_file_id, sample_index)`` where known.  A :class:`RuntimeError` too, as Energon's is."""

    def __init__(
        self, sample_key: str, first: tuple[int, int] | None = None, second: tuple[int, int] | None = None
    ) -> None:
        where = ""
        if first is not None and second is not None:
            where = f" (sample {first[1]} of tar file {first[0]} and sample {second[1]} of tar file {second[0]})"
        super().__init__(
            f"duplicate sample key {sample_key!r}{where}: keys must be unique across the dataset (the "
            f"index's samples.sample_key is UNIQUE); rename one of the samples' files in its shard"
        )
        self.sample_key = sample_key
        self.first = first
        self.second = second

    def __reduce__(self) -> tuple[Any, ...]:  # it may cross to another process: rebuild from the fields
        return (type(self), (self.sample_key, self.first, self.second))


class DatasetChangedError(DatasetError):
    """A shard no longer matches what ``prepare`` recorded (sample count, tar end, ETag). The dataset as a
    whole is in question, so this is never substituted or handed to an error handler: it always stops
    the run, naming the shard; re-run ``datareel prepare``."""


class StorageError(DatasetError):
    """Reading failed because of the machine or the store, not because of the sample: too many open files,
    an I/O error, a full disk, access denied, a connection refused, dropped or timed out, retries run out,
    a file the dataset's index lists gone missing. Never substituted and never handed to an
    ``error_handler``; the micro-batch does not count as consumed (a fresh ``iter(loader)`` makes it again
    once the cause is fixed). The message names the file or URL and the fix."""


class NotFound(StorageError):
    """The file or object does not exist (or is not a file: a directory, a bucket prefix)."""


class AccessDenied(StorageError):
    """The store refused the request (403). S3 also answers 403, not 404, for a missing object when the
    credentials may not list the bucket."""


class TarFormatError(DatasetError):
    """A tar header that cannot be parsed (truncated or changed shard)."""


class ShortBody(Exception):
    """Internal to the remote reader: a ranged GET returned fewer bytes than asked for (a connection dropped
    mid-body); it is retried, and never reaches a caller."""


class RepeatedKey(Exception):
    """Internal to the metadata readers: a key given twice in one mapping (``line``/``first``: 1-based,
    ``None`` in JSON); turned into a :class:`DatasetError` naming the file."""

    def __init__(self, key: Any, old: Any, new: Any, line: int | None = None, first: int | None = None):
        super().__init__(key)
        self.key, self.old, self.new, self.line, self.first = key, old, new, line, first


class PlanningProcessDied(DatareelError):
    """The planning process ended without sending the plan asked for (killed, e.g. for memory)."""


class PlanningMessageError(DatareelError):
    """A message from the planning process could not be read here; the process is stopped (the pipe
    may be out of step) and the window can be planned again."""


def sample_failure(exc: BaseException) -> bool:
    """Whether a failure while making a sample is a property of the sample: its bytes (a malformed tar
    member, a part that does not decode), or the encoder on its content. Only those may be substituted
    (``on_error="substitute"``) or handed to an ``error_handler``. Not a sample failure, anywhere in the
    chain of explicit causes (``raise ... from``): a :class:`StorageError`, a :class:`DatasetChangedError`,
    an ``OSError`` that carries an errno (a failed system call: EMFILE, ENFILE, EIO, ENOSPC, EACCES, ENOENT,
    ...; decoders' own OSErrors, such as PIL's for a truncated image, carry none), a ``ConnectionError``,
    a ``TimeoutError``, a ``urllib.error.URLError``, or any exception of an HTTP or storage client
    (botocore, urllib3, requests, multi-storage-client)."""
    from urllib.error import URLError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (StorageError, DatasetChangedError, ConnectionError, TimeoutError, URLError)):
            return False
        if isinstance(current, OSError) and current.errno is not None:
            return False
        if type(current).__module__.split(".")[0] in _TRANSPORT_MODULES:
            return False
        current = current.__cause__
    return True


_TRANSPORT_MODULES = frozenset({"botocore", "boto3", "urllib3", "requests", "multistorageclient", "aiohttp", "httpx"})


class TopologyError(DatareelError, ValueError):
    """Batch sizes, world size or a checkpoint cursor that cannot be laid out.

    Example: ``global_batch_size=64`` with ``micro_batch_size=3``.
    """


class StateError(DatareelError, ValueError):
    """A saved loader state that cannot be restored here; one of the three kinds below."""


class StateMismatchError(StateError):
    """A saved loader state does not belong to the loader it is restored into (another seed, dataset,
    packing, global batch size, ...).

    ``differences`` maps each differing field to ``(saved, current)``.
    """

    def __init__(self, message: str, differences: dict[str, tuple[object, object]] | None = None):
        super().__init__(message)
        self.differences = differences or {}


class StateDamagedError(StateError):
    """A saved state that is datareel's but damaged: a field missing, of the wrong type or out of range, a
    failed check digest, a cursor that does not exist in its reel."""


class ForeignStateError(StateError):
    """Not a datareel loader state at all (an Energon state, another object), or one of a format version this
    release does not read."""


class StateVersionError(ForeignStateError, StateMismatchError):
    """A datareel state of a format ``version`` this release does not read. Also a :class:`StateMismatchError`
    (as it was before the family existed), whose ``differences`` holds ``version``."""


class StateCheckError(StateDamagedError, StateMismatchError):
    """A state whose ``check`` does not match its ``cursor``, ``pack`` and ``spec``: edited, or spliced from
    two checkpoints, after it was written. Also a :class:`StateMismatchError` (as it was before the family
    existed), whose ``differences`` holds ``check``."""


def restated(exc: DatareelError, message: str) -> DatareelError:
    """An error of ``exc``'s class with another ``message`` (context added to a refusal), keeping a
    :class:`StateMismatchError`'s ``differences``; a plain :class:`DatareelError` for a class that cannot be
    built from a message alone."""
    if isinstance(exc, StateMismatchError):
        return type(exc)(message, exc.differences)
    try:
        return type(exc)(message)
    except TypeError:
        return DatareelError(message)


class BatchError(DatareelError):
    """Making one micro-batch failed: a sample's read, decode or ``encode_sample`` (under
    ``on_error="raise"``), or ``pack_selected_samples``, ``batch`` or ``encode_batch``.

    The micro-batch counts as consumed when this error reaches the training loop: a loop that
    catches it and goes on has skipped it, and the loader's cursor says so.
    """


class SkipSample(Exception):
    """Raise in ``encode_sample`` / ``preencode_sample`` to leave the sample out (Energon's signal, not an
    error).  Exact in the windowed stage (a generator encoder or ``packing_buffer_size``: the skip is
    planned and counted in ``loader.dropped``); elsewhere the sample is substituted like a failing one."""


def is_skip(exc: BaseException) -> bool:
    """Whether ``exc`` is datareel's or Megatron-Energon's ``SkipSample``."""
    return isinstance(exc, SkipSample) or type(exc).__name__ == "SkipSample"


def picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling both ways (it crosses to another process; an exception class whose
    constructor takes other arguments than it stores does not), else a :class:`DatareelError` with its
    class and text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return DatareelError(f"{type(exc).__name__}: {exc}")


class WorkerLost(BaseException):
    """Internal: a dead DataLoader worker found inside torch's ``next()`` (:mod:`datareel.execute.lost`).  Not an
    ``Exception``, so torch's own check (which takes a lock the dead worker may hold) does not catch it;
    datareel's ``next()`` turns it into its ``RuntimeError`` report, and it never reaches the training loop."""


class SampleContextError(DatareelError, RuntimeError):
    """A per-sample helper (such as :func:`datareel.sample_rng`) was called
    outside the processing of a sample."""


def brief(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to about ``limit`` characters (and a few levels; an integer of more than 256 bits
    by its size): for messages quoting a value from a file, which may be huge or nested without bound."""
    import reprlib

    class Brief(reprlib.Repr):
        def repr_int(self, x: int, level: int) -> str:
            return repr(x) if x.bit_length() <= 256 else f"<an integer of {x.bit_length():,} bits>"

    short = Brief()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 5, 8, 8, 8
    short.maxstring, short.maxlong, short.maxother = limit, 40, limit
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _label(name: str, value: Any, where: str | None) -> str:
    return f"{where}({name}={value!r})" if where else f"{name}={value!r}"


INT64_LIMIT = (1 << 63) - 1
"""The largest count or position datareel handles (index math is int64)."""


def check_int(
    value: Any,
    name: str,
    *,
    minimum: int = 0,
    maximum: int = INT64_LIMIT,
    where: str | None = None,
    error: type[DatareelError] = OptionError,
) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) in ``[minimum, maximum]``; else ``error``
    naming it (as ``where(name=value)`` when ``where`` names the call)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not minimum <= value <= maximum:
        rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise error(f"{_label(name, value, where)} must be {rule} and at most {maximum}")
    return int(value)


def check_choice(value: Any, name: str, choices: Collection[Any], *, where: str | None = None) -> Any:
    """``value`` if it is one of ``choices``; else :class:`OptionError` listing them."""
    if value not in choices:
        raise OptionError(f"{_label(name, value, where)} must be one of {list(choices)}")
    return value
