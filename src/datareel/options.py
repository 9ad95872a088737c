"""The :class:`~datareel.Loader`'s options, declared once: :class:`LoaderOptions` is the signature's one source.

``Loader(dataset, **options)`` takes exactly these fields (its ``__signature__`` is made from them, so ``help()``
and editors show every name, type and default); :func:`~datareel.assemble.assemble` reads them from the one
value.  A new option is one field here, with its default and its line of documentation in ``FIELDS``; nothing
else lists them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from .plan.blocks import BlockShuffle
from .plan.schedule import BatchSchedule, RampUp
from .reel import Packing, Stage, WindowedStage


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """Every option of :class:`~datareel.Loader` (see its docstring for what each does)."""

    global_batch_size: int | RampUp | Sequence[tuple[int, int]] | BatchSchedule
    micro_batch_size: int
    seed: int = 0
    shuffle: bool | BlockShuffle = True
    rank: int | None = None
    world_size: int | None = None
    num_workers: int = 0
    task_encoder: Any = None
    repeat: bool = True
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    multiprocessing_context: Any = None
    timeout: float = 0.0
    data_parallel_group: Any = None
    packing: Packing | None = None
    stage: WindowedStage | Stage | None = None
    reseed_global_rng: bool = False
    on_error: str = "raise"
    error_handler: Any = None
    map_threads: int = 0

    @classmethod
    def of(cls, given: dict[str, Any], where: str = "Loader") -> LoaderOptions:
        """The options ``given`` by name; a name that is not an option, or a required one left out, is a
        ``TypeError`` (as for any call) naming it and the options there are."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"{where}() got unknown options {unknown}; its options are {names}")
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in given]
        if missing:
            raise TypeError(f"{where}() needs {missing} (e.g. global_batch_size=32, micro_batch_size=4)")
        return cls(**given)


def signature(first: list[inspect.Parameter]) -> inspect.Signature:
    """``first`` (``self``, ``dataset``), then every option as a keyword-only parameter with its default."""
    hints = inspect.get_annotations(LoaderOptions)
    params = list(first)
    for f in dataclasses.fields(LoaderOptions):
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        params.append(
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[f.name])
        )
    return inspect.Signature(params)
