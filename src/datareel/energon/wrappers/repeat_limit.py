"""Energon's ``RepeatDataset`` and ``LimitDataset`` over what ``get_train_dataset`` / ``get_val_dataset`` return:
each adds one stage to the spec's ``wrappers`` (:class:`~..spec.Repeat`, :class:`~..spec.Limit`), which the
loader's passes apply (:mod:`..passes`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import OptionError, check_int
from ..spec import DatasetSpec, Limit, Repeat
from ..wrapper_config import check_wrapper_config


def RepeatDataset(
    dataset: DatasetSpec, *, repeats: float | None = None, restart: bool = True, worker_config: Any = None
) -> DatasetSpec:
    """Energon's ``RepeatDataset``: the dataset again each time it ends, ``repeats`` times (``None``:
    endlessly; a fraction reads part of the last time); with ``restart=False`` a loader that read
    all its repeats yields nothing more.  ``worker_config``: the dataset's, or refused (:mod:`.wrapper_config`)."""
    _check_spec(dataset, "RepeatDataset")
    check_wrapper_config(dataset, worker_config, "RepeatDataset")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or not repeats > 0):
        raise OptionError(f"RepeatDataset(repeats={repeats!r}): give a number of repeats > 0, or None (endlessly)")
    return replace(dataset, wrappers=(*dataset.wrappers, Repeat(repeats, bool(restart))))


def LimitDataset(
    dataset: DatasetSpec, length: int, *, reset_after_epoch: bool = False, worker_config: Any = None
) -> DatasetSpec:
    """Energon's ``LimitDataset``: each ``for`` over the loader yields at most ``length`` batches
    (split over each rank's workers as Energon does), then the wrapped dataset starts again, so
    every full pass yields the same batches (Energon 7.4.1 resets it also with
    ``reset_after_epoch=False``); a pass left early continues at the next ``for``.  ``worker_config``: the
    dataset's, or refused (:mod:`.wrapper_config`)."""
    _check_spec(dataset, "LimitDataset")
    check_wrapper_config(dataset, worker_config, "LimitDataset")
    check_int(length, "length", minimum=1, where="LimitDataset")
    return replace(dataset, wrappers=(*dataset.wrappers, Limit(int(length), bool(reset_after_epoch))))


def _check_spec(dataset: Any, where: str) -> None:
    if not isinstance(dataset, DatasetSpec):
        raise OptionError(
            f"{where} wraps what datareel.energon.get_train_dataset / get_val_dataset(s) return, got "
            f"{type(dataset).__name__}"
        )
