"""``datareel.Packing``: the options of length-planned packing (pass to ``Loader(packing=...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import check_choice, check_int
from ..plan.pack import OVER_LENGTH
from ..sources.lengths import LengthSpec, check_spec


@dataclass(frozen=True, kw_only=True)
class Packing:
    """Pack samples into sequences of at most ``max_length`` (pass to ``Loader(packing=...)``).

    - ``length``: where lengths come from: ``"index"`` (a length index made by
      ``datareel prepare --lengths``), ``"bytes"`` (bytes on disk), or
      ``fn(source, indices) -> lengths`` (vectorised, cheap).
    - ``window``: input positions planned together (larger packs tighter; a
      restore re-plans one window).
    - ``over_length``: a sample longer than ``max_length``: ``"error"``
      (default), ``"own_pack"`` (a pack of its own), ``"truncate"`` (a pack of
      its own, cut by the task encoder's ``truncate_sample(sample, max_length)``),
      or ``"drop"`` (left out, logged, counted in ``loader.dropped``).

    Example::

        loader = datareel.Loader(corpus, global_batch_size=64, micro_batch_size=4,
                                 packing=datareel.Packing(max_length=4096, length="index"),
                                 task_encoder=MyPacker())
    """

    max_length: int
    length: LengthSpec = "index"
    window: int = 1024
    over_length: str = "error"

    def __post_init__(self) -> None:
        for name in ("max_length", "window"):  # stored as int: numpy integers would not go into a JSON state
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1, where="Packing"))
        check_spec(self.length, "Packing")
        check_choice(self.over_length, "over_length", OVER_LENGTH, where="Packing")

    def fingerprint(self, lengths_digest: str | None = None) -> dict[str, Any]:
        """What a restore must find unchanged.  A length function is named by qualified name and
        module, with ``lengths_digest`` (a digest of its lengths over the first window): a changed
        tokenizer behind the same name is caught."""
        length: Any = self.length
        if callable(length):
            qualname = getattr(length, "__qualname__", type(length).__qualname__)
            module = getattr(length, "__module__", None) or type(length).__module__
            length = {"function": qualname, "module": module, "lengths": lengths_digest}
        return {"max_length": self.max_length, "window": self.window, "over_length": self.over_length, "length": length}
