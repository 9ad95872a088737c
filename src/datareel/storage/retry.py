"""How often and how long a request to a store is tried: :class:`Retry`, from the environment
(``DATAREEL_REMOTE_ATTEMPTS``, ``DATAREEL_REMOTE_TIMEOUT``, ``DATAREEL_REMOTE_DEADLINE``)."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Any

from ..errors import AccessDenied, NotFound, OptionError, StorageError, check_int

#: The environment variables :meth:`Retry.from_env` reads (a DataLoader worker inherits them).
ENV_ATTEMPTS = "DATAREEL_REMOTE_ATTEMPTS"
ENV_TIMEOUT = "DATAREEL_REMOTE_TIMEOUT"
ENV_DEADLINE = "DATAREEL_REMOTE_DEADLINE"


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How often and how long a remote request is tried before it fails.

    - ``attempts``: tries in all (``DATAREEL_REMOTE_ATTEMPTS``). Each try is one HTTP request (a listing:
      one per page; a whole-object download: one per part), since MSC's and botocore's own retries are off.
    - Between tries: ``first_delay · 2^k`` seconds (at most ``max_delay``, with up to 10% jitter).
    - ``connect_timeout`` / ``read_timeout``: seconds one request waits to connect, and for each chunk of
      its answer (``DATAREEL_REMOTE_TIMEOUT`` sets both).
    - ``deadline``: seconds one read may take in all, its tries and waits included
      (``DATAREEL_REMOTE_DEADLINE``; ``None``: no deadline). No try is started that could end later (its
      timeouts counted in full), so a read from a store that accepts connections and never answers fails
      within ``max(deadline, connect_timeout + read_timeout)`` seconds. Downloads of whole objects
      (``datareel prepare`` on a bucket) have no deadline: their tries are bounded by ``attempts``.

    Defaults: 6 tries, 0.1 s doubling to at most 5 s, 10 s to connect, 30 s per read, 120 s a read.
    """

    attempts: int = 6
    first_delay: float = 0.1
    max_delay: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    deadline: float | None = 120.0

    def __post_init__(self) -> None:
        check_int(self.attempts, "attempts", minimum=1, maximum=100, where="Retry")
        for name in ("first_delay", "max_delay"):
            _seconds(getattr(self, name), f"Retry({name}=...)", minimum=0)
        for name in ("connect_timeout", "read_timeout"):
            _seconds(getattr(self, name), f"Retry({name}=...)", minimum=0.001)
        if self.deadline is not None:
            _seconds(self.deadline, "Retry(deadline=...)", minimum=0.001, maximum=86400)

    @classmethod
    def from_env(cls) -> Retry:
        """The defaults, changed by ``DATAREEL_REMOTE_ATTEMPTS`` (tries), ``DATAREEL_REMOTE_TIMEOUT`` (seconds
        to connect and per read of each request) and ``DATAREEL_REMOTE_DEADLINE`` (seconds per read in all;
        ``none`` for no deadline)."""
        values: dict[str, Any] = {}
        attempts = os.environ.get(ENV_ATTEMPTS)
        if attempts is not None:
            digits = attempts.strip()
            if not (digits.isascii() and digits.isdecimal()) or not 1 <= int(digits) <= 100:
                raise OptionError(f"{ENV_ATTEMPTS}={attempts!r} must be a whole number of tries from 1 to 100")
            values["attempts"] = int(digits)
        timeout = os.environ.get(ENV_TIMEOUT)
        if timeout is not None:
            values["connect_timeout"] = values["read_timeout"] = _seconds(timeout, ENV_TIMEOUT, minimum=0.001)
        deadline = os.environ.get(ENV_DEADLINE)
        if deadline is not None:
            none = deadline.strip().lower() in ("none", "")
            values["deadline"] = None if none else _seconds(deadline, ENV_DEADLINE, minimum=0.001, maximum=86400)
        return cls(**values)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try ``attempt`` (0-based)."""
        base = min(self.max_delay, self.first_delay * 2**attempt)
        return base * (1 + 0.1 * random.random())

    def settings(self) -> str:
        """The settings a failed read names, with the variables that change them."""
        deadline = "none" if self.deadline is None else f"{self.deadline:g} s"
        return (
            f"{ENV_TIMEOUT} (each request; now {self.connect_timeout:g} s to connect, {self.read_timeout:g} s per "
            f"read), {ENV_ATTEMPTS} (now {self.attempts}) or {ENV_DEADLINE} (each read in all; now {deadline})"
        )


def _seconds(value: Any, name: str, *, minimum: float, maximum: float = 600) -> float:
    """``value`` (a number, or its text from an environment variable) as seconds in ``[minimum, maximum]``."""
    number = value
    if isinstance(value, str):
        try:  # float() also reads '٣' (a non-ASCII digit): refused, as the whole-number settings refuse it
            if not value.isascii():
                raise ValueError(value)
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not minimum <= number <= maximum:
        raise OptionError(f"{name} is {value!r}; it must be a number of seconds from {minimum:g} to {maximum:g}")
    return float(number)


def verdict(
    retry: Retry,
    url: str,
    what: str,
    transient: bool,
    described: str,
    exc: Exception,
    attempt: int,
    started: float,
    deadline: bool,
) -> float:
    """After failed try ``attempt`` (1-based) of ``what`` on ``url`` (``transient``: the client's judgement of
    ``exc``, ``described``: its text): the seconds to wait before the next try under ``retry`` (``deadline``:
    within :attr:`Retry.deadline`), or the :class:`~datareel.errors.StorageError` (raised) that ends the tries."""
    if isinstance(exc, FileNotFoundError):
        raise NotFound(f"{url} does not exist ({what})") from None
    if isinstance(exc, PermissionError):
        raise AccessDenied(f"{url}: access denied ({what}): {described}; check the credentials") from None
    limit = retry.deadline if deadline else None
    elapsed, wait = time.monotonic() - started, retry.delay(attempt - 1)
    late = limit is not None and elapsed + wait + retry.connect_timeout + retry.read_timeout > limit
    if not transient:
        raise StorageError(f"{url}: {what} failed: {type(exc).__name__}: {described}") from exc
    if attempt == retry.attempts or late:
        why = f"another try could end after the {limit:g} s deadline" if late and limit else "no tries left"
        raise StorageError(
            f"{url}: {what} failed after {attempt} {'try' if attempt == 1 else 'tries'} in "
            f"{elapsed:.1f} s ({why}): {type(exc).__name__}: {described}; check that the store answers at "
            f"this endpoint (AWS_ENDPOINT_URL or the MSC profile) and the network, or wait longer with "
            f"{retry.settings()}"
        ) from exc
    return wait
