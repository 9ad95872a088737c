"""``batch_size=None`` through the facade: samples handed out one by one, as Energon does.

Energon 7.4.1 without a batch size runs the crude-sample cookers, ``preencode_sample`` /
``encode_sample``, then online packing (``packing_buffer_size``: ``select_samples_to_pack``,
``postencode_sample`` per packed sample, ``pack_selected_samples``) or ``postencode_sample``, and
calls neither ``batch`` nor ``encode_batch``.  :class:`Unbatched` gives datareel's loader an
encoder that does exactly that: one-sample micro-batches, each handed out as :class:`One` (not a
dict, so the batch maker adds no ``__source__`` / ``__positions__`` fields) and unwrapped by the
facade (:func:`unwrap`): the loader yields the sample exactly as the hooks made it.

The user's hooks stay bound to the user's encoder (``self`` is theirs, also under Energon's
``@stateless(restore_seeds=True)``, whose wrapper is taken off: datareel reseeds the global
generators per sample instead); their checks are the loader's own (:class:`ResolvedEncoder`).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import default_convert

from ..execute.encoder import ResolvedEncoder

_PACKING_HOOKS = ("select_samples_to_pack", "pack_selected_samples")


class Hook:
    """A resolved hook of the user's encoder, carrying what the loader reads from a method: the
    function (``__func__``, so a generator ``encode_sample`` is still seen as one) and whether its
    global generators are reseeded (``__restore_seeds__``).  ``prepare`` runs first (the cookers)."""

    def __init__(self, method: Any, restore_seeds: bool, prepare: Any = None):
        self.method, self.prepare = method, prepare
        self.__func__ = getattr(method, "__func__", method)
        self.__restore_seeds__ = restore_seeds

    def __call__(self, sample: Any) -> Any:
        if self.prepare is not None:
            sample = self.prepare(sample)
        return self.method(sample)


class Unbatched:
    """The user's task encoder with one-sample batches and without ``batch`` / ``encode_batch``."""

    def __init__(self, encoder: Any, *, online: bool):
        resolved = ResolvedEncoder(encoder, online=online)  # the user's hooks, checked (refusals name them)
        cook = resolved.cook if (resolved.cookers or resolved.sample_classes) else None
        # the first stage (preencode_sample, else encode_sample) after the cookers, as encode_sample
        hooks = {"encode_sample": Hook(resolved.first, _reseeds(resolved, "encode_sample", "preencode_sample"), cook)}
        if resolved.post is not None:
            hooks["postencode_sample"] = Hook(resolved.post, "postencode_sample" in resolved.reseeds)
        if online:
            for name in _PACKING_HOOKS:
                hooks[name] = Hook(getattr(resolved, name), name in resolved.reseeds)
        for name, hook in hooks.items():  # instance attributes: the loader takes them for the user's own
            setattr(self, name, hook)
        self.task_encoder = encoder

    def batch(self, samples: list[Any]) -> Any:
        return samples[0]

    def encode_batch(self, batch: Any) -> Any:
        return One(batch)


class One:
    """One sample on its way out of the batch maker (see the module docstring)."""

    __slots__ = ("sample",)

    def __init__(self, sample: Any):
        self.sample = sample


def unwrap(batch: Any) -> Any:
    """What the facade hands out for a batch maker's result: the sample of a :class:`One`, and (both ways)
    in the types Energon's loader gives, through torch's ``default_convert`` as its DataLoader applies it
    (numpy arrays become tensors, tuples lists; dataclasses and strings stay as they are)."""
    return default_convert(batch.sample if type(batch) is One else batch)


class Group:
    """A :class:`~datareel.groups.GlobalBatch` whose micro-batches are handed out as the loader's (:func:`unwrap`)."""

    def __init__(self, group: Any):
        self._group = group

    def __iter__(self) -> Group:
        return self

    def __next__(self) -> Any:
        return unwrap(next(self._group))

    def __getattr__(self, name: str) -> Any:  # index, size, accumulation_steps, ...
        return getattr(self._group, name)


def _reseeds(resolved: ResolvedEncoder, *names: str) -> bool:
    return bool(set(names) & resolved.reseeds)
