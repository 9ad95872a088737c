"""Length-planned packing, one stage: its options (:class:`Packing`) and its planner (:class:`LengthPlanner`).

Each window's packs come from first-fit-decreasing on its samples' lengths (see
:mod:`datareel.plan.pack`); the window reel (:mod:`.window`) does the rest.  Lengths come from a
length index, the bytes on disk or a cheap function, never from reading samples, so planning is
cheap and inline by default.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DatareelError, OptionError, check_choice, check_int
from ..plan.nodes import ReelPlan
from ..plan.pack import OVER_LENGTH, plan_window
from ..sources.base import Source
from ..sources.lengths import LengthSpec, check_spec, lengths_of
from .planner import WindowPlan, WindowPlanner
from .stage import StageContext, check_timeout
from .units import Units
from .window import WindowReel, patience, window_inputs

log = logging.getLogger("datareel")


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
    - ``background``: plan windows in a planning process, a few ahead (for a slow length
      function; the function and the sources must then pickle under spawn); ``plan_timeout``:
      seconds to wait for its plan of a window before planning it inline.

    Example::

        loader = datareel.Loader(corpus, global_batch_size=64, micro_batch_size=4,
                                 packing=datareel.Packing(max_length=4096, length="index"),
                                 task_encoder=MyPacker())
    """

    max_length: int
    length: LengthSpec = "index"
    window: int = 1024
    over_length: str = "error"
    background: bool = False
    plan_timeout: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_length", "window"):  # stored as int: numpy integers would not go into a JSON state
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1, where="Packing"))
        check_spec(self.length, "Packing")
        check_choice(self.over_length, "over_length", OVER_LENGTH, where="Packing")
        object.__setattr__(self, "background", bool(self.background))
        check_timeout(self.plan_timeout, "Packing")

    def to_json(self, lengths_digest: str | None = None) -> dict[str, Any]:
        """The state's ``spec.packing``: what a restore must find unchanged (``background`` and
        ``plan_timeout`` may change).  A length function is named by qualified name and module, with
        ``lengths_digest`` (a digest of its lengths over the first window): a changed tokenizer behind
        the same name is caught."""
        length: Any = self.length
        if callable(length):
            qualname = getattr(length, "__qualname__", type(length).__qualname__)
            module = getattr(length, "__module__", None) or type(length).__module__
            length = {"function": qualname, "module": module, "lengths": lengths_digest}
        return {"max_length": self.max_length, "window": self.window, "over_length": self.over_length, "length": length}

    fingerprint = to_json  # the name before to_json

    @classmethod
    def from_json(cls, data: dict[str, Any], *, length: LengthSpec | None = None, **options: Any) -> Packing:
        """The options a state's ``spec.packing`` records (a ``KeyError`` for a field it lacks).  A length
        function is recorded by name only: pass it as ``length`` (datareel never imports what a state
        names); ``options``: ``background``, ``plan_timeout``."""
        saved = data["length"]
        if isinstance(saved, dict) and length is None:
            raise OptionError(
                f"the state's packing lengths come from the function {saved.get('module')}:{saved.get('function')}; "
                f"pass it as Packing.from_json(..., length=fn)"
            )
        return cls(
            max_length=data["max_length"], length=saved if length is None else length, window=data["window"],
            over_length=data["over_length"], **options,
        )  # fmt: skip

    def planner(self, context: StageContext) -> LengthPlanner:
        """The planner of these options for one loader (the :class:`~.stage.Stage` protocol)."""
        return LengthPlanner(self, context.sources, context.plan)


class LengthPlanner(WindowPlanner):
    """Plans a window's packs from its samples' lengths (``packing``'s source of lengths over ``sources``)."""

    def __init__(self, packing: Packing, sources: list[Source], plan: ReelPlan):
        self.packing, self.sources, self.plan = packing, sources, plan
        self._digest: str | None = None
        self._fits: bool | None = None  # whether any sample fits max_length (asked only if packs stop coming)

    def __call__(self, window: int, positions: np.ndarray, source_ids: np.ndarray, indices: np.ndarray) -> WindowPlan:
        packing, lengths = self.packing, self._lengths(source_ids, indices)
        try:
            plans, dropped = plan_window(lengths, packing.max_length, packing.over_length)
        except DatareelError as exc:
            over = np.flatnonzero(lengths > packing.max_length)
            if not over.size:
                raise
            j = int(over[0])
            raise DatareelError(
                f"{exc} (sample {int(indices[j])} of source {self.sources[source_ids[j]].name!r} at reel position "
                f"{int(positions[j])})"
            ) from None
        truncate = (lengths > packing.max_length) & (packing.over_length == "truncate")
        units = Units.of(plans, positions, source_ids, indices, truncate=truncate)
        notes = (positions[dropped], source_ids[dropped], indices[dropped]) if dropped.size else None
        return WindowPlan(units, int(dropped.size), 0.0, notes)

    def report(self, window: int, plan: WindowPlan) -> None:
        if plan.notes is None:
            return
        positions, source_ids, indices = plan.notes
        log.warning(
            "packing dropped %d over-long samples of window %d (max_length=%d): %s",
            len(positions),
            window,
            self.packing.max_length,
            ", ".join(
                f"{self.sources[s].name}[{i}]@{p}"
                for p, s, i in zip(positions[:10].tolist(), source_ids[:10].tolist(), indices[:10].tolist())
            ),
        )

    def spec(self) -> dict[str, Any]:
        return {"packing": self.packing.to_json(self._length_digest())}

    def bound(self, inputs: int) -> int | None:
        return inputs  # a pack holds at least one input sample

    def stalled(self, window: int, empty: int) -> None:
        if not self._some_sample_fits():
            raise DatareelError(
                f"packing dropped every sample of {empty} consecutive windows (up to reel position "
                f"{(window + 1) * self.packing.window}), and no sample of any source is <= max_length="
                f"{self.packing.max_length}: this endless reel would never yield a pack; raise max_length, "
                f"or use over_length='own_pack' or 'truncate'"
            )

    def _lengths(self, source_ids: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Lengths of samples ``indices`` of leaves ``source_ids`` (int32[k], int64[k]) -> int64[k]."""
        lengths = np.empty(len(indices), dtype=np.int64)
        for s in np.unique(source_ids).tolist():
            mask = source_ids == s
            lengths[mask] = lengths_of(self.sources[s], indices[mask], self.packing.length)
        return lengths

    def _some_sample_fits(self) -> bool:
        """Whether any sample of any source is <= max_length (computed once: every source's lengths)."""
        if self._fits is None:
            self._fits = any(
                bool(
                    (
                        lengths_of(source, np.arange(len(source), dtype=np.int64), self.packing.length)
                        <= self.packing.max_length
                    ).any()
                )
                for source in self.sources
            )
        return self._fits

    def _length_digest(self) -> str | None:
        """A digest of a length function's output over the first window (``None`` for index / bytes)."""
        if not callable(self.packing.length):
            return None
        if self._digest is None:
            _, leaf, index = window_inputs(self.plan, self.packing.window, None, 0)  # the same with repeat=False
            lengths = self._lengths(leaf, index)
            self._digest = hashlib.blake2b(lengths.astype("<i8").tobytes(), digest_size=8).hexdigest()
        return self._digest


class PackedReel(WindowReel):
    """A window reel of length-planned packs (the constructor kept from before :class:`WindowReel`)."""

    def __init__(self, plan: ReelPlan, sources: list[Source], packing: Packing, pass_length: int | None):
        sizes = [len(source) for source in sources]
        planner = LengthPlanner(packing, sources, plan)
        super().__init__(plan, packing, pass_length, planner, patience=patience(plan, sizes, packing.window))
