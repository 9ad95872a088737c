"""The exception types datareel raises.

Every error datareel raises on purpose derives from :class:`DatareelError`, so a
training script can catch them all with one clause.  Errors that are also a
wrong *value* derive from :class:`ValueError` too, so generic handlers keep
working.
"""

from __future__ import annotations


class DatareelError(Exception):
    """Root of every error datareel raises on purpose."""


class TopologyError(DatareelError, ValueError):
    """Batch sizes, world size or a checkpoint cursor that cannot be laid out.

    Example: ``global_batch_size=64`` with ``micro_batch_size=3``.
    """


class StateMismatchError(DatareelError, ValueError):
    """A saved loader state does not belong to the loader it is restored into.

    ``differences`` maps each differing field to ``(saved, current)``.
    """

    def __init__(self, message: str, differences: dict[str, tuple[object, object]]):
        super().__init__(message)
        self.differences = differences


class SampleContextError(DatareelError, RuntimeError):
    """A per-sample helper (such as :func:`datareel.sample_rng`) was called
    outside the processing of a sample."""
