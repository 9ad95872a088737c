"""A failing ``batch`` / ``encode_batch`` drops its batch, as megatron.energon's ``BatchDataset`` does.

Energon makes a batch inside an error context: ``SkipSample`` raised by the batch hooks drops the batch
silently, any other failure of the batch's content is told to the error handler (the worker config's
``global_error_handler`` by default, which logs it) and drops the batch, and after ``TOLERANCE`` failures in a row
the failure is raised.  The facade wraps the user's hooks (:func:`drop_failed_batches`) so that a failed batch is
made as :class:`Dropped`; the facade's streams hand the next batch out instead.  The reel's cursor has counted
the dropped micro-batch, so a restore continues after it, as Energon's state does.  A failure of the machine or
the store (:func:`datareel.errors.sample_failure` says which) is never dropped, and a handler that raises stops
the loader with its own exception.
"""

from __future__ import annotations

from typing import Any

from ..errors import is_skip, sample_failure

TOLERANCE = 100
"""Batches that may fail in a row before the failure is raised (Energon's default failure tolerance)."""

HOOKS = ("batch", "encode_batch")


class Dropped:
    """What a batch hook that failed returns: a batch to leave out (compared by type).  ``error`` is the
    failure, kept in the process that made it: ``restore_sample`` raises it, as Energon's default restore
    handler does; a worker sends the marker alone (an exception may not pickle)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None = None):
        self.error = error

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return Dropped, ()


def is_dropped(batch: Any) -> bool:
    """Whether ``batch`` is one a failing batch hook dropped."""
    return isinstance(batch, Dropped)


class DroppingHook:
    """The user's batch hook ``name`` of ``owner`` (looked up on its class, so pickling it pickles the encoder,
    not a bound method that would find this wrapper again) with Energon's error context around it."""

    def __init__(self, owner: Any, name: str, handler: Any):
        self.owner, self.name, self.handler = owner, name, handler
        self.failures = 0  # in a row, in this process
        function = getattr(type(owner), name)
        for marker in ("__stateless__", "__restore_seeds__", "__failure_tolerance__"):
            if hasattr(function, marker):
                setattr(self, marker, getattr(function, marker))

    def __call__(self, value: Any) -> Any:
        if is_dropped(value):  # encode_batch of a batch that batch() dropped
            return value
        try:
            made = getattr(type(self.owner), self.name)(self.owner, value)
        except Exception as exc:
            if is_skip(exc):
                return Dropped(exc)
            if not sample_failure(exc) or self.handler is None:
                raise
            self.failures += 1
            if self.failures > TOLERANCE:
                raise
            try:
                self.handler(exc, value)  # Energon's handler told of the batch's samples; it may raise to stop
            except Exception as raised:  # its own exception stops the loader as it is (not as a BatchError)
                raised._datareel_from_handler = True  # type: ignore[attr-defined]
                raise
            return Dropped(exc)
        self.failures = 0
        return made


def drop_failed_batches(encoder: Any, handler: Any) -> None:
    """Wrap ``encoder``'s own ``batch`` and ``encode_batch`` (:class:`DroppingHook`, instance attributes); a
    slotted or frozen encoder, or one without the hook, keeps it as it is."""
    for name in HOOKS:
        if callable(getattr(type(encoder), name, None)) and not isinstance(
            getattr(encoder, "__dict__", {}).get(name), DroppingHook
        ):
            try:
                setattr(encoder, name, DroppingHook(encoder, name, handler))
            except AttributeError:
                return
