"""``energon checkpoint {redist,info}``: Energon redistributes saved loader states to another number of
ranks.  A datareel state is one cursor, the same on every rank, and restores on any world size and worker
count as it is; these commands stop, naming that (``datareel inspect`` describes a state)."""

from __future__ import annotations

import click

from ._common import unsupported

_WHY = (
    "a datareel loader state is one cursor, identical on every rank, and restores on any world size and "
    "worker count without redistribution; describe one with `datareel inspect STATE`"
)


@click.group(name="checkpoint")
def command() -> None:
    """(Not available: datareel states restore on any topology as they are.)"""


@command.command(name="redist", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command_redist(args: tuple[str, ...]) -> None:
    """(Not available: no redistribution is needed.)"""
    raise unsupported("checkpoint redist", _WHY)


@command.command(name="info", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command_info(args: tuple[str, ...]) -> None:
    """(Not available: use `datareel inspect`.)"""
    raise unsupported("checkpoint info", _WHY)


__all__ = ["command", "command_info", "command_redist"]
