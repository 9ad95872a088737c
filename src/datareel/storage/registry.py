"""URL schemes -> their stores: one registered reader factory per scheme.

``files_for(url)`` picks the store by the URL's scheme (``s3://``, ``msc://``, ``file://``, or one a user
registered); a path without a scheme is a local path.  A factory is called on every lookup (in each
process: a DataLoader worker after fork, or one started fresh): return a cached instance where making one
costs (a client, a pool), as :func:`~datareel.storage.remote.remote_files` does, one per process.  Under
the ``spawn`` / ``forkserver`` start methods workers register nothing themselves: register at import of a
module the workers import too (the one defining the task encoder, say).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import DatasetError, OptionError
from .schemes import scheme_of as scheme_of

if TYPE_CHECKING:
    from .base import Files

Factory = Callable[[], "Files"]


def _local() -> Files:
    from .local import LOCAL

    return LOCAL


def _remote() -> Files:
    from .remote import remote_files

    return remote_files()


#: scheme (lower case) -> factory of its store. ``file`` is the local file system; the rest are stores
#: (``s3``, ``gs``, ``az`` through obstore, ``msc`` through multi-storage-client: :mod:`.remote`).
SCHEMES: dict[str, Factory] = {"file": _local, "s3": _remote, "gs": _remote, "az": _remote, "msc": _remote}


#: scheme -> a rewrite of its URLs into another path or URL (``dss://name@version/...`` -> a cache folder):
#: schemes that name a place by convention rather than a store of their own.
ALIASES: dict[str, Callable[[str], str]] = {}


def register_alias(scheme: str, resolve: Callable[[str], str]) -> None:
    """Rewrite ``scheme://...`` URLs with ``resolve(url)`` (a local path or a URL of a registered store)
    wherever a dataset path is opened (:func:`~datareel.storage.path.as_path`)."""
    name = scheme.lower()
    if name in SCHEMES:
        raise OptionError(f"{name}:// is a registered store; an alias cannot take its place")
    ALIASES[name] = resolve


def resolve_alias(path: str) -> str:
    """``path`` rewritten by its scheme's alias (:func:`register_alias`), or as it is."""
    scheme = scheme_of(path)
    resolve = ALIASES.get(scheme) if scheme is not None else None
    return path if resolve is None else resolve(path)


def register_scheme(scheme: str, factory: Factory, *, replace: bool = False) -> None:
    """Read ``scheme://...`` URLs through ``factory()``, a :class:`~datareel.storage.Files` (subclass
    :class:`~datareel.storage.StoreFiles` and implement ``info`` and ``read_range``).  A scheme already
    registered is refused unless ``replace=True``."""
    name = scheme.lower() if isinstance(scheme, str) else scheme
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9+.-]*", name):
        raise OptionError(f"scheme={scheme!r} is not a URL scheme: a letter, then letters, digits, '+', '-' or '.'")
    if not callable(factory):
        raise OptionError(
            f"the factory for {name}:// must be callable (it returns the scheme's Files), got {factory!r}"
        )
    if name in SCHEMES and not replace:
        raise OptionError(f"URL scheme {name}:// is registered already; pass replace=True to replace its reader")
    SCHEMES[name] = factory


def unregister_scheme(scheme: str) -> None:
    """Forget a scheme :func:`register_scheme` added (its URLs are refused again)."""
    SCHEMES.pop(scheme.lower(), None)


def is_remote(path: object) -> bool:
    """Whether ``path`` names an object in a store (a URL of a registered scheme other than ``file://``)."""
    scheme = scheme_of(path)
    return scheme is not None and scheme != "file" and scheme in SCHEMES


def files_for(path: str) -> Files:
    """The store of ``path``: by its URL scheme, the local file system for a path without one.  A URL of a
    scheme nobody registered is refused naming the registered ones."""
    scheme = scheme_of(path)
    if scheme is None:
        return _local()
    factory = SCHEMES.get(scheme)
    if factory is None:
        raise DatasetError(
            f"{path}: no store is registered for URL scheme {scheme}:// (registered: "
            f"{', '.join(sorted(SCHEMES))}); register its reader with datareel.storage.register_scheme"
            f"({scheme!r}, factory)"
        )
    return factory()


def join(base: str, relative: str) -> str:
    """``relative`` resolved against the directory ``base`` (a local path or a URL); an absolute path
    or a URL in ``relative`` is returned as it is.  In a URL, ``.`` and ``..`` segments are resolved
    one by one (other segments, empty ones included, are kept: object keys may hold ``//``); climbing
    above the bucket is an error."""
    if "://" in relative or relative.startswith("/"):
        return relative
    if scheme_of(base) == "file":
        base = base[len("file://") :]
    if not is_remote(base):
        return posixpath.normpath(posixpath.join(base, relative))
    scheme, rest = base.split("://", 1)
    bucket, _, key = rest.partition("/")
    segments = key.split("/") if key else []
    if segments and segments[-1] == "":
        segments.pop()  # a trailing slash names the same directory
    parts: list[str] = []
    for segment in segments + relative.split("/"):
        if segment == "..":
            if not parts:
                raise DatasetError(f"{relative!r} relative to {base} climbs above the bucket")
            parts.pop()
        elif segment != ".":
            parts.append(segment)
    return f"{scheme}://{bucket}" + "".join(f"/{p}" for p in parts)
