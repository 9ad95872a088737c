"""The interface every source implements."""

from __future__ import annotations

import abc
import hashlib
import json
from typing import Any


class Source(abc.ABC):
    """A finite, random-access collection of raw samples.

    ``len(source)`` samples, read one at a time by index with :meth:`read`.
    Sources are cheap to pickle: DataLoader workers receive a copy and open
    any files lazily on first read.
    """

    name: str

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def read(self, index: int) -> Any:
        """The raw sample at ``index`` (``0 <= index < len(self)``)."""

    def describe(self) -> dict[str, Any]:
        """What identifies this source's content for checkpoint fingerprints.

        Subclasses add what they know (shard lists, split parts, ...).
        """
        return {"kind": type(self).__name__, "name": self.name, "size": len(self)}

    def fingerprint(self) -> dict[str, Any]:
        """A short summary (name, size) and a digest of :meth:`describe`."""
        blob = json.dumps(self.describe(), sort_keys=True, default=str).encode("utf-8")
        digest = hashlib.blake2b(blob, digest_size=8).hexdigest()
        return {"name": shorten(self.name), "size": len(self), "digest": digest}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, size={len(self)})"


def shorten(name: str, limit: int = 80) -> str:
    """Names go into the state verbatim up to ``limit`` characters (the digest covers the rest)."""
    return name if len(name) <= limit else name[: limit - 3] + "..."
