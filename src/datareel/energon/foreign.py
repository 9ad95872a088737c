"""Reading objects made with ``megatron.energon`` by what they do and how they are configured, not by class.

Megatron-LM imports its loader functions from one place and keeps its task encoders, sample and batch
dataclasses, ``@stateless`` hooks, cookers, decoders, ``WorkerConfig`` and file stores on
``megatron.energon``: a client that switches only the loader imports to ``datareel.energon`` hands the facade
megatron.energon's objects.  Each reader here takes the facade's own object or one that behaves as it, with
the attributes megatron.energon 7.4.1 gives it (its ``SampleDecoder.config()``, its ``WorkerConfig`` fields,
its ``EPath``'s ``url``; its task encoders' ``cache`` / ``current_*_index`` answered by :func:`adopt_encoder`),
and refuses by name, with the fix, what the facade cannot honour: a decoder with its own decoding code, and
megatron.energon's savable-loader states (:func:`refuse_energon_state`).  The decoder's readers
(:func:`as_sample_decoder`, :func:`user_decoder`) live beside ``SampleDecoder``
(:mod:`.flavors.webdataset.sample_decoder`), an ``EPath``'s (:func:`path_url`) beside ``EPath``
(:mod:`.epathlib.names`); both are importable here too.

Sample and batch dataclasses, ``@stateless`` markers (``__stateless__``, and the seed wrapper of
``restore_seeds=True``, unwrapped by :class:`datareel.execute.encoder.ResolvedEncoder`), cookers
(``cook``, ``has_subflavors``, the ``__cooker_need_*__`` markers), ``SourceInfo`` fields and file stores /
cache pools (``get``, ``_get_raw``, ``_decode_raw``, ``get_path``) are read by attribute where they are used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ForeignStateError, OptionError
from .epathlib.names import path_url as path_url
from .flavors.webdataset.sample_decoder import DECODER_CONFIG as DECODER_CONFIG
from .flavors.webdataset.sample_decoder import as_sample_decoder as as_sample_decoder
from .flavors.webdataset.sample_decoder import user_decoder as user_decoder

__all__ = ["adopt_encoder", "as_sample_decoder", "as_worker_config", "path_url", "refuse_energon_state", "user_decoder"]

_ENERGON = "megatron.energon"

_PROPERTIES = ("cache", "current_batch_index", "current_sample_index")
_ADOPTED: dict[type, type] = {}


def adopt_encoder(encoder: Any) -> None:
    """Give a task encoder whose ``cache``, ``current_batch_index`` and ``current_sample_index`` are
    megatron.energon's (they read megatron.energon's worker state, which a datareel loader does not run) the
    facade's, which read what the facade loader stamps on it (:mod:`.task_encoder.position`): the instance's class
    becomes a subclass of its own class (the same name) defining only those three.  It pickles as its own class
    (re-adopted when unpickled); an instance whose class cannot be changed is left as it is."""
    cls = type(encoder)
    if cls in _ADOPTED.values() or not any(_defined_in(cls, name, _ENERGON) for name in _PROPERTIES):
        return
    if cls not in _ADOPTED:
        from .task_encoder.base import TaskEncoder

        body = {name: vars(TaskEncoder)[name] for name in _PROPERTIES}
        body.update(__module__=cls.__module__, __qualname__=cls.__qualname__, __reduce_ex__=_reduce)
        _ADOPTED[cls] = type(cls.__name__, (cls,), body)
    try:
        encoder.__class__ = _ADOPTED[cls]
    except TypeError:  # a layout that cannot change class (slots): megatron.energon's properties stay
        pass


def _defined_in(cls: type, name: str, module: str) -> bool:
    for base in cls.__mro__:
        if name in vars(base):
            return base.__module__.startswith(module)
    return False


def _reduce(self: Any, protocol: Any) -> Any:
    """An adopted encoder pickles as an instance of the user's class, adopted again when unpickled."""
    return _readopted, (type(self).__mro__[1],), dict(vars(self))


def _readopted(cls: type) -> Any:
    encoder = cls.__new__(cls)
    adopt_encoder(encoder)
    return encoder


_WORKER_FIELDS = (
    "rank",
    "world_size",
    "num_workers",
    "data_parallel_group",
    "seed_offset",
    "worker_debug_path",
    "worker_log_level",
    "global_error_handler",
    "restore_error_handler",
)


def as_worker_config(config: Any, where: str) -> Any:
    """The facade's :class:`~datareel.energon.worker.WorkerConfig` for ``config``: ``None`` and the facade's own
    are returned as they are; another object with ``rank``, ``world_size`` and ``num_workers`` (megatron.energon's
    ``WorkerConfig``) gives every field the facade's has (``data_parallel_group``, ``seed_offset``, the error
    handlers, the debug fields) to one.  Anything else is refused by name."""
    from .worker import WorkerConfig

    if config is None or isinstance(config, WorkerConfig):
        return config
    missing = [name for name in _WORKER_FIELDS[:3] if not hasattr(config, name)]
    if missing:
        raise OptionError(
            f"{where}: worker_config={config!r} has no {', '.join(missing)}; give a WorkerConfig(rank=, "
            f"world_size=, num_workers=) (datareel.energon's or megatron.energon's)"
        )
    return WorkerConfig(**{name: getattr(config, name) for name in _WORKER_FIELDS if hasattr(config, name)})


_ENERGON_STATE = ("worker_states", "next_worker_id")
"""The fields of megatron.energon's ``SavableDataLoaderState`` (what its savable loader's ``save_state_rank``
returns, one per rank in ``save_state_global``'s list) that no datareel state has."""


def refuse_energon_state(state: Any, where: str) -> None:
    """Raise :class:`~datareel.ForeignStateError` when ``state`` is, or a global state's list holds, a state saved
    by megatron.energon's savable loader (read by its fields, also after ``torch.save`` / ``torch.load`` or as a
    plain dict): datareel cannot continue one yet."""
    from ..state.document import looks_like_energon

    states = state if isinstance(state, (list, tuple)) else [state]
    for i, item in enumerate(states):
        if _is_energon_state(item) or looks_like_energon(item):
            what = "a global state (one per rank)" if item is not state else "a rank state"
            at = f" (item {i} of the list)" if item is not state else ""
            kind = "SavableDataLoaderState, as a dict" if isinstance(item, dict) else type(item).__name__
            raise ForeignStateError(
                f"{where}: this is {what} written by Megatron-Energon's own savable loader{at} (megatron.energon's "
                f"{kind}: worker_states, next_worker_id, its workers' iterator positions, which "
                f"cannot be converted into a datareel cursor). This datareel version cannot continue it "
                f"(adopting megatron.energon states is planned for a later version). Start the datareel.energon "
                f"loader fresh (restore nothing: it reads from the first sample of its order, so samples this job "
                f"already trained on come again), or keep this job on megatron.energon until then"
            )


def _is_energon_state(value: Any) -> bool:
    if isinstance(value, dict):
        return all(name in value for name in _ENERGON_STATE)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = {f.name for f in dataclasses.fields(value)}
        return all(name in names for name in _ENERGON_STATE)
    return False
