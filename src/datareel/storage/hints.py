"""What a hint may swallow.  A hint (a prefetch of a micro-batch's bytes, a fetch of blocks ahead, the node
cache) only saves time: when it fails, the read that needs the bytes reads them itself and reports what is
wrong under the error policy, so a hint may give up on the failures of the store, the machine or the data.
It must not swallow anything else: a configuration error (:class:`~datareel.errors.OptionError`, e.g. a bad
``DATAREEL_*`` value) or a programming error (``TypeError``, ``AttributeError``, ...) would turn the
feature off without a word, so those are raised."""

from __future__ import annotations

from ..errors import DatasetError, OptionError, sample_failure


def hint_failure(exc: BaseException) -> bool:
    """Whether a hint may swallow ``exc``: a failure of the store or the machine (a
    :class:`~datareel.errors.StorageError`, an ``OSError`` with an errno, a timeout, a dropped connection, an
    HTTP client's error: :func:`~datareel.errors.sample_failure` says no), or of the data, which the read
    reports (a :class:`~datareel.errors.DatasetError`). Never an :class:`~datareel.errors.OptionError`."""
    if isinstance(exc, OptionError) or not isinstance(exc, Exception):
        return False
    return isinstance(exc, DatasetError) or not sample_failure(exc)
