"""``energon mount``: Energon mounts a dataset as a FUSE file system; datareel has no such tool, and this
command stops naming that."""

from __future__ import annotations

import click

from ._common import unsupported


@click.command(name="mount", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """(Not available: datareel mounts no file systems.)"""
    raise unsupported("mount", "datareel has no FUSE view of a dataset; read samples with `datareel preview`")


__all__ = ["command"]
