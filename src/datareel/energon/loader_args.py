"""The facade's argument rules that more than one factory shares: ``sample_type=`` checked against the dataset,
the loader options of ``get_loader`` / ``get_savable_loader`` (:class:`LoaderOptions`), and the default
error handler taken from the ``WorkerConfig``.

Every argument is honoured or refused by name; the ones that concern only Energon's way of keeping state
(``checkpoint_every_sec``, ``checkpoint_every_min_n_samples``, ``n_checkpoints``: a datareel state is a
cursor, ready at any time) are accepted with one explaining log line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..blend.tree import Blend
from ..errors import OptionError, check_int
from ..sources.typed import SAMPLE_CLASSES, Sample

log = logging.getLogger("datareel")
_CHECKPOINT_ARGS = ("checkpoint_every_sec", "checkpoint_every_min_n_samples", "n_checkpoints")
_explained: set[str] = set()


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """What ``get_loader`` / ``get_savable_loader`` take besides the dataset (Energon's names and defaults)."""

    watchdog_timeout_seconds: float | None = 60
    watchdog_initial_timeout_seconds: float | None = None
    fail_on_timeout: bool = False
    gc_collect_every_n_steps: int = 0  # a gc.collect() in the main process every n batches (0: never)
    gc_freeze_at_start: bool = True  # a pass that collects freezes an unfrozen heap, without workers (.wrappers)

    @classmethod
    def of(cls, kwargs: dict[str, Any], where: str, gc_default: int) -> tuple[LoaderOptions, Any]:
        """-> (options, cache_pool) from a loader call's keyword arguments; what is left is refused by name."""
        for name in _CHECKPOINT_ARGS:
            if name in kwargs:
                kwargs.pop(name)
                if name not in _explained:
                    _explained.add(name)
                    log.info(
                        "datareel.energon: %s is accepted and not needed: a datareel state is a cursor, computed on "
                        "demand at any batch, never a replay of checkpoints kept in workers",
                        name,
                    )
        cache_pool = kwargs.pop("cache_pool", None)
        values = {}
        for name in ("watchdog_timeout_seconds", "watchdog_initial_timeout_seconds"):
            if name in kwargs:
                value = kwargs.pop(name)
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                    raise OptionError(
                        f"{where}: {name}={value!r} must be a number of seconds > 0, or None (no watchdog)"
                    )
                values[name] = value
        if "fail_on_timeout" in kwargs:
            values["fail_on_timeout"] = bool(kwargs.pop("fail_on_timeout"))
        if "gc_freeze_at_start" in kwargs:
            freeze = kwargs.pop("gc_freeze_at_start")
            if not isinstance(freeze, bool):
                raise OptionError(f"{where}: gc_freeze_at_start={freeze!r} must be True or False; pass one of them")
            values["gc_freeze_at_start"] = freeze
        gc_every = kwargs.pop("gc_collect_every_n_steps", gc_default)
        values["gc_collect_every_n_steps"] = check_int(gc_every, "gc_collect_every_n_steps", minimum=0, where=where)
        if kwargs:
            raise OptionError(f"{where}: datareel.energon does not know the arguments {sorted(kwargs)}")
        return cls(**values), cache_pool


def default_handler(handler: Any, worker_config: Any) -> Any:
    """``handler=`` when given (datareel's ``(exception, key[, sources])``), else the worker config's
    ``global_error_handler`` (Energon's default) called as Energon calls it, ``(exception, sample, sources)``
    (:func:`datareel.energon.worker.datareel_error_handler`)."""
    if handler is not None:
        return handler
    from .worker import datareel_error_handler

    return datareel_error_handler(getattr(worker_config, "global_error_handler", None))


def sample_type_names(dataset: Any) -> list[str]:
    """The sample type of each dataset a source or blend reads (``"crude"``, or ``"?"`` where not known)."""
    leaves = dataset.leaves() if isinstance(dataset, Blend) else [dataset]
    return [_found(leaf.describe()) for leaf in leaves]


def _found(described: Any) -> str:
    if isinstance(described, dict):
        if isinstance(described.get("sample_type"), str):
            return described["sample_type"]
        for value in described.values():
            name = _found(value)
            if name != "?":
                return name
    return "?"


def check_sample_type(dataset: Any, sample_type: Any, where: str) -> None:
    """Energon's ``sample_type=`` rule: every dataset read yields that type or a subclass of it; else refused."""
    if sample_type is None:
        return
    if not isinstance(sample_type, type):
        raise OptionError(f"{where}: sample_type={sample_type!r} must be a sample class, e.g. TextSample")
    for name in sample_type_names(dataset):
        if name == "crude":
            ok = sample_type.__name__ == "CrudeSample" or sample_type.__name__ == "dict"
        elif name in SAMPLE_CLASSES:  # by name along the class's bases: Energon's own classes match too
            ok = sample_type.__name__ in {c.__name__ for c in SAMPLE_CLASSES[name].__mro__}
        else:
            ok = sample_type is object or sample_type.__name__ == Sample.__name__  # by name: Energon's too
        if not ok:
            raise OptionError(
                f"{where}: sample_type={sample_type.__name__} does not match the dataset, whose samples are "
                f"{name if name != '?' else 'of a type datareel cannot tell'}; pass sample_type={name}"
                f"{'' if name != 'crude' else ' (CrudeSample)'} or drop sample_type"
            )
