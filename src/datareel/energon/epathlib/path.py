"""``EPath``: a ``pathlib``-like path to a local file or an object in a store, on datareel's storage.

    EPath("/data/ds")                       # local (absolute; a relative path is taken from the cwd)
    EPath("msc://profile/bucket/ds")        # a multi-storage-client profile (MSC config or rclone.conf)
    EPath("s3://bucket/ds")                 # MSC's implicit S3 profile (datareel's extension)
    EPath("dss://name@version/sub")         # under $NVDATASET_CACHE_DIR/name/version/sub

Bytes go through :func:`datareel.storage.files_for` (no client of its own; a pickled path holds no
credentials).  ``os.fspath`` of a local path gives its file system path, so every datareel opener takes an
``EPath``.  A ``dss://`` path lies under the ``dss`` alias's cache (the facade's ``NVDATASET_CACHE_DIR``,
:mod:`datareel.energon.epathlib`), else under the environment variable of that name.
"""

from __future__ import annotations

import glob
import os
import posixpath
import shutil
import warnings
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ...errors import DatasetError
from ...storage.registry import files_for, resolve_alias
from .glob import matcher, walk_local
from .io import local_stat, open_remote
from .names import DEFAULT_PROFILE_NAME, DSS, PROTOCOL, dss_name, path_url, resolve_posix, url_of

__all__ = ["DEFAULT_PROFILE_NAME", "EPath", "dss_location"]


class EPath:
    """A local path or a path in a store, with ``pathlib``'s face (``/``, ``name``, ``parent``, ``open``,
    ``glob``, ``walk``, ...).  ``profile`` is :data:`DEFAULT_PROFILE_NAME` for local paths, ``"dss"`` for
    dataset-cache paths, else the MSC profile; ``internal_path`` the absolute path inside it."""

    __slots__ = ("internal_path", "profile")

    internal_path: PurePosixPath
    profile: str

    def __init__(self, initial_path: str | EPath | os.PathLike[str]) -> None:
        if isinstance(initial_path, EPath):
            self.internal_path, self.profile = initial_path.internal_path, initial_path.profile
            return
        if isinstance(initial_path, os.PathLike):
            self.profile, self.internal_path = DEFAULT_PROFILE_NAME, resolve_posix(str(Path(initial_path).absolute()))
            return
        if not isinstance(initial_path, str):  # megatron.energon's EPath: by its url; anything else refused
            initial_path = path_url(initial_path, f"EPath({initial_path!r}): pass a str, a pathlib.Path or an EPath")
        match = PROTOCOL.match(initial_path)
        if match is None:
            self.profile, self.internal_path = DEFAULT_PROFILE_NAME, resolve_posix(str(Path(initial_path).absolute()))
            return
        protocol, profile, path = match["protocol"], match["profile"], match["path"] or ""
        if protocol == "file":
            self.profile = DEFAULT_PROFILE_NAME
            self.internal_path = resolve_posix(str(Path(f"{profile}/{path}").absolute()))
            return
        if protocol == DSS:
            dss_name(profile)
            self.profile, self.internal_path = DSS, resolve_posix(f"/{profile}/{path}")
            return
        if protocol == "rclone":
            warnings.warn("rclone:// protocol is deprecated. Use msc:// instead.", FutureWarning, stacklevel=2)
        elif protocol == "s3":
            profile = f"_s3-{profile}"
        elif protocol != "msc":
            raise DatasetError(
                f"EPath({initial_path!r}): unknown protocol {protocol}:// (msc://, s3://, dss://, file:// or a "
                f"local path)"
            )
        self.profile, self.internal_path = profile, resolve_posix("/" + path)

    # -- where the bytes are -------------------------------------------------------------------------------

    def _backing(self) -> str:
        """The local path, or the store URL, this path names (a dss path by way of ``NVDATASET_CACHE_DIR``)."""
        url = self.url
        if self.profile != DSS:
            return url
        found = resolve_alias(url)  # the facade's NVDATASET_CACHE_DIR where it is loaded, else the environment's
        return found if found != url else dss_location(url, os.environ.get("NVDATASET_CACHE_DIR"))

    def is_local(self) -> bool:
        return "://" not in self._backing()

    def local_path(self) -> Path:
        backing = self._backing()
        if "://" in backing:
            raise ValueError(f"Path {self} is not local")
        return Path(backing)

    def __fspath__(self) -> str:
        backing = self._backing()
        if "://" in backing:
            raise TypeError(f"{self!r} names an object in a store, not a local file; pass its URL (str(path))")
        return backing

    @property
    def url(self) -> str:
        return url_of(self.profile, self.internal_path)

    # -- reading and writing -------------------------------------------------------------------------------

    def open(self, mode: str = "r", block_size: int | None = None, prefetch_file: bool = False) -> IO[Any]:
        """A file object: ``"r"`` / ``"rb"`` read, ``"w"`` / ``"wb"`` write (a missing parent folder is made;
        an object in a store is written when the file is closed)."""
        if mode not in ("r", "rb", "w", "wb"):
            raise DatasetError(f"EPath.open(mode={mode!r}): the modes are 'r', 'rb', 'w' and 'wb'")
        backing = self._backing()
        if "://" in backing:
            return open_remote(backing, mode, block_size=block_size, whole=prefetch_file)
        if mode.startswith("w"):
            Path(backing).parent.mkdir(parents=True, exist_ok=True)
        return open(backing, mode)

    def read_text(self) -> str:
        with self.open("r", prefetch_file=True) as f:
            return f.read()

    def read_bytes(self) -> bytes:
        with self.open("rb", prefetch_file=True) as f:
            return f.read()

    def write_text(self, text: str) -> None:
        with self.open("w") as f:
            f.write(text)

    def write_bytes(self, data: bytes) -> None:
        with self.open("wb") as f:
            f.write(data)

    def copy(self, target: EPath) -> None:
        """Copy this file (or every file under this folder) to ``target``, across stores too."""
        if not self.is_file():
            for found in self.walk():
                found.copy(target / found.relative_to(self))
            return
        source, dest = self._backing(), EPath(target)._backing()
        if "://" not in source and "://" not in dest:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
        elif "://" not in dest:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            files_for(source).download(source, dest)
        elif "://" not in source and hasattr(files_for(dest), "upload"):
            files_for(dest).upload(source, dest)
        else:
            files_for(dest).write(dest, self.read_bytes())

    def move(self, target: EPath) -> None:
        self.copy(target)
        self.unlink()

    def unlink(self) -> None:
        backing = self._backing()
        if "://" in backing:
            files_for(backing).delete(backing)
        else:
            os.unlink(backing)

    def mkdir(self, exist_ok: bool = True, parents: bool = False) -> None:
        """Make the folder (locally; a store has no folders, and Energon's ``mkdir`` makes none at all)."""
        if self.is_local():
            self.local_path().mkdir(parents=parents, exist_ok=exist_ok)

    # -- asking about it -----------------------------------------------------------------------------------

    def is_file(self) -> bool:
        backing = self._backing()
        return files_for(backing).exists(backing) if "://" in backing else os.path.isfile(backing)

    def is_dir(self) -> bool:
        """A local folder; in a store, a prefix some object lies under."""
        backing = self._backing()
        if "://" not in backing:
            return os.path.isdir(backing)
        try:
            return bool(files_for(backing).list(backing))
        except DatasetError:
            return False

    def size(self) -> int:
        backing = self._backing()
        return files_for(backing).info(backing).size if "://" in backing else os.path.getsize(backing)

    def stat(self) -> Any:
        """``key``, ``content_length``, ``last_modified`` (a datetime), ``etag`` and ``type``, asked anew."""
        backing = self._backing()
        if "://" in backing:
            return files_for(backing).stat(backing)
        return local_stat(backing)

    def walk(self) -> Any:
        """Every file under this folder (following links locally), as EPaths."""
        backing = self._backing()
        if "://" not in backing:
            for rel in walk_local(backing):
                yield self / rel
            return
        for url in files_for(backing).list(backing):
            yield self / url[len(backing.rstrip("/")) + 1 :]

    def glob(self, pattern: str) -> Any:
        """What matches ``pattern`` under this folder: locally Python's recursive glob (folders included, as
        Energon's); in a store the objects whose path relative to it matches (``*``, ``?``, ``[...]`` within
        a name, ``**`` for any number of folders)."""
        backing = self._backing()
        if "://" not in backing:
            for found in sorted(glob.glob(os.path.join(glob.escape(backing), pattern), recursive=True)):
                yield self / os.path.relpath(found, backing)
            return
        match = matcher(pattern)
        fixed = []
        for part in pattern.split("/")[:-1]:
            if any(c in part for c in "*?["):
                break
            fixed.append(part)
        base = self / "/".join(fixed) if fixed else self
        for found in base.walk():
            if match(found.relative_to(self)):
                yield found

    # -- path arithmetic -----------------------------------------------------------------------------------

    def _with(self, internal: PurePosixPath) -> EPath:
        new = EPath(self)
        new.internal_path = internal
        return new

    @property
    def name(self) -> str:
        return self.internal_path.name

    @property
    def parent(self) -> EPath:
        return self._with(self.internal_path.parent)

    @property
    def display_name(self) -> str:
        return self.internal_path.parts[1] if self.profile == DSS else self.name

    def with_suffix(self, suffix: str) -> EPath:
        return self._with(self.internal_path.with_suffix(suffix))

    def relative_to(self, other: EPath) -> str:
        if self.profile != other.profile:
            raise ValueError(f"{self} and {other} are in different profiles: relative_to needs one profile")
        return str(self.internal_path.relative_to(other.internal_path))

    def __truediv__(self, other: str | EPath | os.PathLike[str]) -> EPath:
        if isinstance(other, EPath):
            return other
        other = os.fspath(other)
        if other.startswith("/") or "://" in other:
            return EPath(other)
        return self._with(resolve_posix(posixpath.join(str(self.internal_path), other)))

    def __lt__(self, other: EPath) -> bool:
        if self.profile != other.profile:
            raise ValueError(f"cannot order {self} and {other}: they are in different profiles")
        return self.internal_path < other.internal_path

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"EPath({str(self)!r})"

    def __hash__(self) -> int:
        return hash((self.internal_path, self.profile))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EPath) and (self.internal_path, self.profile) == (other.internal_path, other.profile)

    def __getstate__(self) -> dict[str, Any]:
        return {"internal_path": self.internal_path, "profile": self.profile}  # no client, no credentials

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.internal_path, self.profile = state["internal_path"], state["profile"]


def dss_location(url: str, cache: Any) -> str:
    """Where ``dss://name@version/rest`` lies: ``cache/name/version/rest`` (a local path or a store URL)."""
    if cache is None:
        raise DatasetError(f"{url}: set NVDATASET_CACHE_DIR to the dataset cache that dss:// paths live in")
    parts = PurePosixPath("/" + url[len(f"{DSS}://") :]).parts
    name, version = dss_name(parts[1])
    return (EPath(cache) / str(PurePosixPath(name, version, *parts[2:])))._backing()
