"""Energon's ``megatron.energon.watchdog``: a timer that fires when one ``next()`` of an iterator takes too long.

:class:`Watchdog` times each ``next()`` of the iterator it watches (:meth:`Watchdog.watch`), the first one
against ``initial_timeout`` (``None``: ``timeout``); the time the consumer spends between items is not
counted.  When a ``next()`` runs past its deadline, a background thread logs every thread's stack and
calls ``callback`` once for that ``next()``; a callback that raises stops the process (Energon's
``fail_on_timeout``), after logging the error.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

log = logging.getLogger("datareel")
__all__ = ["Watchdog"]


class Watchdog:
    """Times each ``next()`` of a watched iterator; see the module docstring."""

    def __init__(
        self,
        timeout: float,
        initial_timeout: float | None = None,
        callback: Callable[[], None] | None = None,
        dump_stacks: bool = True,
    ):
        self.timeout, self.initial_timeout = float(timeout), initial_timeout
        self.callback, self.dump_stacks = callback, dump_stacks
        self._deadline: float | None = None  # armed while a next() runs
        self._stop = False
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items``, each ``next()`` timed."""
        first = True
        try:
            while True:
                self._arm(self.initial_timeout if first and self.initial_timeout is not None else self.timeout)
                first = False
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    self._arm(None)
                yield item
        finally:
            self.finish()

    def finish(self) -> None:
        """Stop the timer thread (the watched iteration ended)."""
        with self._cv:
            self._stop, self._deadline = True, None
            self._cv.notify_all()

    def _arm(self, seconds: float | None) -> None:
        with self._cv:
            self._deadline = None if seconds is None else perf_counter() + seconds
            if self._thread is None and seconds is not None:
                self._stop = False
                self._thread = threading.Thread(target=self._run, name="datareel-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._stop:
                    self._thread = None
                    return
                if self._deadline is None:
                    self._cv.wait(timeout=1.0)
                    continue
                remaining = self._deadline - perf_counter()
                if remaining > 0:
                    self._cv.wait(timeout=remaining)
                    continue
                self._deadline = None  # fires once per next()
            self._fire()

    def _fire(self) -> None:
        if self.dump_stacks:
            log.warning("watchdog: a next() took longer than %s s; the threads' stacks:\n%s", self.timeout, _stacks())
        if self.callback is None:
            return
        try:
            self.callback()
        except Exception:
            log.error("watchdog: stopping the process (fail_on_timeout):\n%s", traceback.format_exc())
            sys.stderr.flush()
            os._exit(1)


def _stacks() -> str:
    """Every thread's stack but the watchdog's own."""
    me, names = threading.get_ident(), {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident != me:
            out.append(f'Thread {ident} "{names.get(ident, "?")}":\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(out)
