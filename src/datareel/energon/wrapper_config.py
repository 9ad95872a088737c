"""The wrappers' ``worker_config=`` (``LimitDataset``, ``RepeatDataset``, ``MapDataset``, ``BatchDataset``):
checked against the dataset's, never dropped.

megatron.energon 7.4.1 refuses a wrapper whose ``worker_config`` is not its dataset's ("Dataset and wrapper
worker configs must match", an assertion; it compares rank, world size and workers per rank), since a
``LimitDataset`` splits its length over the workers its config names.  The facade refuses the same configs
with a named :class:`~datareel.OptionError` (tests/energon/test_energon_dropped_arguments.py, beside it).
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .foreign import as_worker_config


def check_wrapper_config(dataset: Any, worker_config: Any, where: str) -> None:
    """``worker_config`` (``None``, datareel.energon's or megatron.energon's) must equal ``dataset``'s."""
    if worker_config is None:
        return
    given, own = as_worker_config(worker_config, where), dataset.worker_config
    if not (given == own):
        raise OptionError(
            f"{where}: worker_config={_where(given)} is not the dataset's WorkerConfig ({_where(own)}, given to "
            f"get_train_dataset / get_val_dataset); a wrapper runs in the dataset's loader and splits over its "
            f"workers: pass the same worker_config (or leave it out)"
        )


def _where(config: Any) -> str:
    fields = ("rank", "world_size", "num_workers")
    return "WorkerConfig(" + ", ".join(f"{name}={getattr(config, name, '?')!r}" for name in fields) + ")"
