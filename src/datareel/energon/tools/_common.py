"""What the tools share: a path argument as an :class:`~datareel.energon.epathlib.EPath`, the location
datareel's storage reads it from, datareel errors as click errors, and the media filter of the
``--media-metadata-by-*`` options."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from ...errors import DatareelError
from ...storage.path import location_of
from ..epathlib import EPath


class EPathType(click.ParamType):
    """A click parameter taking a local path or a URL (``msc://``, ``s3://``, ``dss://``) as an EPath."""

    name = "path"

    def convert(self, value: Any, param: Any, ctx: Any) -> EPath:
        try:
            return value if isinstance(value, EPath) else EPath(value)
        except (DatareelError, ValueError, AssertionError) as exc:
            self.fail(str(exc), param, ctx)


def where(path: EPath) -> str:
    """The local path or the store URL datareel reads ``path`` from."""
    return location_of(path)


@contextlib.contextmanager
def as_click_errors() -> Iterator[None]:
    """A datareel error (a refused option, a damaged dataset) ends the command with its message, exit 1."""
    try:
        yield
    except DatareelError as exc:
        raise click.ClickException(str(exc)) from None


def media_filter(glob: str | None, header: bool, extension: bool) -> Any:
    """The media filter of the ``--media-metadata-by-*`` options (``None`` without them)."""
    if glob is None and not header and not extension:
        return None
    try:
        from ..media.extractor import MediaFilterConfig
    except ImportError as exc:
        raise click.ClickException(
            f"--media-metadata-by-...: datareel.energon.media.extractor (MediaFilterConfig) is not available "
            f"({exc}); prepare without the media metadata options"
        ) from None
    return MediaFilterConfig.parse(glob, header, extension)


def unsupported(tool: str, why: str) -> click.ClickException:
    """The error of a tool datareel does not provide."""
    return click.ClickException(f"`energon {tool}` is not available through datareel: {why}")
