"""What every worker needs besides the descriptor: the seed, the randomness and error policies, packing's
``max_length`` and the user's error handler (:class:`ExecOptions`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, check_choice

ON_ERROR = ("raise", "substitute")


@dataclass(frozen=True, kw_only=True)
class ExecOptions:
    """What every worker needs besides the descriptor: the seed, the randomness and error policies,
    and packing's ``max_length`` (for ``truncate_sample``)."""

    seed: int
    reseed_global: bool = False
    on_error: str = "raise"
    max_length: int | None = None
    handler: Callable[[Exception, str], Any] | None = None
    read_blocks: tuple[tuple[int, int], ...] = ()
    """``(source id, samples per block)`` of each source the block shuffle reads in blocks
    (:class:`datareel.BlockShuffle`); sources not listed are read sample by sample."""
    map_threads: int = 0
    """Threads per process for the per-sample stage (read, decode, ``encode_sample``); 0: in the calling thread."""
    ahead: tuple[Any, int] | None = None
    """``(plan, positions ahead)`` where block sources in buckets fetch the blocks of about one block period
    ahead (:class:`~datareel.execute.ahead.Lookahead`); ``None``: no lookahead."""

    @classmethod
    def of(cls, seed: int, reseed_global: Any, on_error: Any, packing: Any, handler: Any = None) -> ExecOptions:
        """Checked options from the loader's arguments (``packing``: a Packing or None)."""
        check_choice(on_error, "on_error", ON_ERROR)
        if handler is not None and not callable(handler):
            raise OptionError(f"error_handler={handler!r} must be a function (exception, sample key) -> None")
        if handler is not None and _required_positionals(handler) >= 3:  # Energon's (exc, sample, sources)
            handler = _WithSources(handler)
        return cls(
            seed=seed,
            reseed_global=bool(reseed_global),
            on_error=on_error,
            max_length=getattr(packing, "max_length", None),
            handler=handler,
        )


def _required_positionals(fn: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


@dataclass(frozen=True)
class _WithSources:
    """A handler with Energon's three required arguments, called as ``handler(exception, key, None)``."""

    handler: Callable[..., Any]

    def __call__(self, exc: Exception, key: str) -> Any:
        return self.handler(exc, key, None)
