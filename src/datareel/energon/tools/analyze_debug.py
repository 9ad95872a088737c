"""``energon analyze-debug``: Energon reads its workers' debug logs (``worker_debug_path``) into a report
and a heat map.  datareel writes no such logs — which sample each step read is a function of the
position (``datareel verify`` and ``datareel plot`` show it) — so this command stops, naming that."""

from __future__ import annotations

import click

from ._common import unsupported


@click.command(name="analyze-debug", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """(Not available: datareel writes no worker debug logs; see `datareel verify` / `datareel plot`.)"""
    raise unsupported(
        "analyze-debug",
        "datareel writes no worker debug logs (WorkerConfig(worker_debug_path=) is Energon's); the samples of "
        "every step follow from the position: list them with `datareel verify STATE --show N` or draw them with "
        "`datareel plot`",
    )


__all__ = ["command"]
