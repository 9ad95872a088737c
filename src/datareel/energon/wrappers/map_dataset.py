"""Energon's ``MapDataset``: a function applied to each sample (each batch, once the dataset is batched),
compiled into the spec's task encoder (:mod:`.base`)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

from ...errors import OptionError
from ..task_encoder.tolerance import check_wrapper_tolerance
from ..wrapper_config import check_wrapper_config
from .base import composed, spec_of


def MapDataset(
    dataset: Any,
    map_fn: Any,
    *,
    worker_config: Any = None,
    stateless_map_fn: bool = False,
    map_fn_config: Any = None,
    failure_tolerance: int = 100,
) -> Any:
    """``dataset`` with ``map_fn`` applied to each of its items, in the workers (``stateless_map_fn`` and
    ``map_fn_config`` describe the function to Energon's checkpoints and logs; datareel's restores never replay
    it).  ``failure_tolerance`` other than Energon's 100 is refused (datareel keeps no count of failures), as is
    a ``worker_config`` other than the dataset's.  A generator ``map_fn`` (several items per item) is refused."""
    spec = spec_of(dataset, "MapDataset")
    check_wrapper_tolerance(failure_tolerance, "MapDataset")
    check_wrapper_config(spec, worker_config, "MapDataset")
    if not callable(map_fn):
        raise OptionError(f"MapDataset: map_fn={map_fn!r} is not callable")
    if inspect.isgeneratorfunction(map_fn):
        raise OptionError(
            "MapDataset: a generator map_fn yields a varying number of items per item, which would shift every "
            "later reel position; make encode_sample of the task encoder the generator (datareel plans its "
            "outputs per window, elastically)"
        )
    encoder = composed(spec)
    if spec.batch_size is None:
        encoder = encoder.with_(sample_maps=(*encoder.sample_maps, map_fn))
    else:
        encoder = encoder.with_(batch_maps=(*encoder.batch_maps, map_fn))
    return replace(spec, task_encoder=encoder)
