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
from ..execute.encoder import is_seed_wrapper

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
    """The user's batch hook ``name`` of ``owner`` with Energon's error context around it.  The hook is looked
    up on the class when called (pickling this pickles the encoder and the name, never a bound method that
    would find this wrapper again), and read as the loader reads a hook
    (:class:`~datareel.execute.encoder.ResolvedEncoder`): Energon's ``@stateless(restore_seeds=True)`` wrapper
    unwrapped (datareel reseeds: ``__restore_seeds__``), the function itself as ``__func__`` (a generator
    ``batch`` is refused as before)."""

    def __init__(self, owner: Any, name: str, handler: Any):
        self.owner, self.name, self.handler = owner, name, handler
        self.failures = 0  # in a row, in this process
        declared = getattr(type(owner), name)
        self.__restore_seeds__ = is_seed_wrapper(declared) or bool(getattr(declared, "__restore_seeds__", False))
        self.__stateless__ = bool(getattr(declared, "__stateless__", False))

    @property
    def __func__(self) -> Any:
        declared = getattr(type(self.owner), self.name)
        return declared.__wrapped__ if is_seed_wrapper(declared) else declared

    def __call__(self, value: Any) -> Any:
        if is_dropped(value):  # encode_batch of a batch that batch() dropped
            return value
        try:
            made = self.__func__(self.owner, value)
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
