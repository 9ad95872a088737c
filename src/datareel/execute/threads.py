"""The threaded map of the per-sample stage (``Loader(..., map_threads=n)``): a micro-batch's samples made by
``n`` threads of this process, handed back in order.

Reading, decoding (PIL/libjpeg, numpy, tokenizers) and ``encode_sample`` often release the GIL, so a few
threads run them in parallel inside a DataLoader worker, or in the training process with ``num_workers=0``.
What stays the same as without threads, by construction:

- *order*: :meth:`ThreadMap.map` returns one :class:`Outcome` per item, in the items' order;
- *randomness*: the per-sample context (:func:`~datareel.execute.randomness.sample_context`) is
  thread-local, so :func:`datareel.sample_rng` / :func:`datareel.sample_torch_generator` are keyed by the
  sample's position in whichever thread runs it.  Reseeding the process-global ``random`` / ``numpy.random``
  / ``torch`` generators per sample cannot be shared by threads: :func:`check_threadable` refuses
  ``reseed_global_rng=True`` (and hooks marked ``@stateless(restore_seeds=True)``) with ``map_threads``;
- *errors*: a sample's exception is captured in its thread and raised again, unchanged, by
  :meth:`Outcome.get` in the calling thread, which applies the error policy (handler calls, substitution)
  in position order, as without threads.

Each process makes its own pool on first use (a DataLoader worker after fork: never the parent's
threads); at most ``2 n`` items are submitted ahead of the one being taken.
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import OptionError, check_int

#: At most this many threads per process (``map_threads``).
MAX_THREADS = 256
#: Hooks that run per sample in the threads: one marked to reseed the global generators cannot.
PER_SAMPLE_HOOKS = ("encode_sample", "preencode_sample", "postencode_sample")


class Outcome:
    """What one item gave: its value, or the exception it raised (:meth:`get` returns or raises it)."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: Exception | None = None):
        self.value, self.error = value, error

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def outcome_of(fn: Callable[..., Any], *args: Any) -> Outcome:
    """``fn(*args)``'s outcome (an :class:`Exception` captured; anything else, e.g. ``KeyboardInterrupt``,
    raised)."""
    try:
        return Outcome(fn(*args))
    except Exception as exc:
        return Outcome(error=exc)


class ThreadMap:
    """A pool of ``threads`` threads, made lazily in each process that maps (picklable: the pool is not sent)."""

    def __init__(self, threads: int):
        self.threads = threads
        self._pid: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._touched: set[int] = set()  # sources first used in this process by the calling thread

    def _executor(self) -> ThreadPoolExecutor:
        if self._pid != os.getpid() or self._pool is None:  # first use here (a forked worker: its own threads)
            self._pid, self._touched = os.getpid(), set()
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="datareel-map")
            weakref.finalize(self, self._pool.shutdown, wait=False)  # a loader dropped: its idle threads end
        return self._pool

    def first_use(self, source_id: int) -> bool:
        """Whether ``source_id`` is used for the first time in this process (then remembered)."""
        if self._pid != os.getpid():
            self._executor()
        new = source_id not in self._touched
        self._touched.add(source_id)
        return new

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Outcome]:
        """``fn(item)``'s outcome for each item, in order; every item is done when it returns."""
        pool, limit = self._executor(), 2 * self.threads
        out: list[Outcome] = []
        pending: deque[Future[Outcome]] = deque()
        for item in items:
            if len(pending) >= limit:
                out.append(pending.popleft().result())
            pending.append(pool.submit(outcome_of, fn, item))
        out += [future.result() for future in pending]
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"threads": self.threads, "_pid": None, "_pool": None, "_touched": set()}


def planned_stages(
    threads: ThreadMap,
    first_stage: Callable[[int, int, int], list[Any]],
    post: Callable[[int, int, Any], Any],
    members: Sequence[tuple[int, int, int]],
    outputs: Sequence[int],
) -> dict[int, tuple[Outcome, dict[int, Outcome]]]:
    """The planned members of a micro-batch (the windowed stage's): for each input position, its first stage's
    outcome and the outcome of ``post`` (``postencode_sample``) of each of its outputs wanted, made by
    ``threads`` (one task per input: its outputs need its first stage). members: ``(position, source,
    index)`` each; outputs: which output of its input each member is."""
    wanted: dict[int, tuple[int, int, list[int]]] = {}  # input position -> (source, index, its outputs wanted)
    for (p, s, i), k in zip(members, outputs):
        wanted.setdefault(p, (s, i, []))[2].append(k)

    def stage(p: int) -> tuple[Outcome, dict[int, Outcome]]:
        s, i, ks = wanted[p]
        first = outcome_of(first_stage, p, s, i)
        got = first.value if first.error is None else []
        return first, {k: outcome_of(post, p, k, got[k]) for k in ks if k < len(got)}

    return dict(zip(wanted, (o.get() for o in threads.map(stage, list(wanted)))))


def check_map_threads(map_threads: Any, reseed_global_rng: bool, reseeds: set[str]) -> int:
    """``map_threads`` checked: an integer from 0 to :data:`MAX_THREADS`; with threads, no per-sample reseeding
    of the process-global generators (``reseed_global_rng=True``, or a per-sample hook in ``reseeds``: marked
    ``@stateless(restore_seeds=True)``), which threads would share."""
    threads = check_int(map_threads, "map_threads", maximum=MAX_THREADS)
    if threads and reseed_global_rng:
        raise OptionError(
            f"map_threads={threads} with reseed_global_rng=True: the global random / numpy.random / torch "
            f"generators are one per process, so threads encoding samples at once cannot each have theirs "
            f"reseeded per sample; draw from datareel.sample_rng() / datareel.sample_torch_generator() "
            f"(thread-local, keyed by position) and set reseed_global_rng=False, or set map_threads=0"
        )
    marked = [name for name in PER_SAMPLE_HOOKS if name in reseeds]
    if threads and marked:
        raise OptionError(
            f"map_threads={threads} with task_encoder.{marked[0]} marked @stateless(restore_seeds=True): that "
            f"reseeds the process-global random / numpy.random / torch generators per sample, which threads "
            f"encoding samples at once would share; drop restore_seeds and draw from datareel.sample_rng() / "
            f"datareel.sample_torch_generator() (thread-local, keyed by position), or set map_threads=0"
        )
    return threads
