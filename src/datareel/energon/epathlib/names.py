"""How an :class:`~.epath.EPath` is named (Energon's conventions): ``msc://PROFILE/path``, ``s3://bucket/path``
(multi-storage-client's implicit profile ``_s3-bucket``), ``dss://name@version/path`` (a dataset cache),
``file://`` and local paths; an absolute path inside the profile, ``.`` and ``..`` resolved."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from ...errors import DatasetError

DEFAULT_PROFILE_NAME = "__filesystem__"
"""The local profile's name, as MSC calls it (its ``RESERVED_POSIX_PROFILE_NAME``; tests/storage compare them).
Not imported from MSC: importing MSC costs ~0.3 s, and every process that unpickles a record's EPath (the
first batch with workers) would pay it."""

PROTOCOL = re.compile(r"^(?P<protocol>[a-z0-9]+)://(?P<profile>[^/]+?)(?:/(?P<path>.*))?$")
DSS = "dss"
S3_PROFILE = re.compile(r"^_s3-(?P<bucket>.+)$")  # MSC's implicit profile of an s3:// bucket


def resolve_posix(path: str | PurePosixPath) -> PurePosixPath:
    """An absolute path with ``.`` and ``..`` resolved; climbing above the root is an error."""
    parts = PurePosixPath(path).parts
    if not parts or parts[0] != "/":
        raise ValueError(f"Only absolute paths are supported, got {str(path)!r}")
    kept: list[str] = []
    for part in parts[1:]:
        if part == "..":
            if not kept:
                raise ValueError(f"Path above root: {path}")
            kept.pop()
        elif part != ".":
            kept.append(part)
    return PurePosixPath("/", *kept)


def dss_name(dataset: str) -> tuple[str, str]:
    """``name@version`` -> ``(name, version)``, refused as Energon refuses it (its type: an AssertionError)."""
    name, at, version = dataset.rpartition("@")
    if not at:
        raise AssertionError("DSS paths must include a dataset version separated by '@'")
    if not name or not version:
        raise AssertionError("DSS paths must include non-empty dataset name and version")
    return name, version


def path_url(path: Any, refusal: str) -> str:
    """The URL of megatron.energon's ``EPath`` (its ``url``: a local path, ``msc://PROFILE/...`` or ``dss://...``),
    which datareel's ``EPath`` reads as it reads a string; anything else raises ``DatasetError(refusal)``."""
    url = getattr(path, "url", None)
    if isinstance(url, str) and hasattr(path, "internal_path") and hasattr(path, "profile"):
        return url
    raise DatasetError(refusal)


def url_of(profile: str, internal_path: PurePosixPath) -> str:
    """The URL of the path ``internal_path`` in ``profile``: a local path, ``dss://...``, ``s3://...`` (MSC's
    implicit profile of a bucket) or ``msc://PROFILE/...``."""
    if profile == DEFAULT_PROFILE_NAME:
        return str(internal_path)
    if profile == DSS:
        return f"dss://{str(internal_path).lstrip('/')}"
    s3 = S3_PROFILE.match(profile)
    if s3:
        return f"s3://{s3['bucket']}{internal_path}"
    return f"msc://{profile}{internal_path}"
