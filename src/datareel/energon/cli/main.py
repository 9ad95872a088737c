"""The ``energon`` command group on datareel: ``prepare``, ``prepare-media``, ``info``, ``lint``,
``preview``, and the tools datareel does not provide (``analyze-debug``, ``checkpoint``, ``mount``), which
stop naming why (:mod:`datareel.energon.tools`)."""

from __future__ import annotations

import click

from ..tools.analyze_debug import command as analyze_debug_command
from ..tools.checkpoint import command as checkpoint_command
from ..tools.info import command as info_command
from ..tools.lint import command as lint_command
from ..tools.mount import command as mount_command
from ..tools.prepare import command as prepare_command
from ..tools.prepare_media import command as prepare_media_command
from ..tools.preview import command as preview_command


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ... import __version__

    click.echo(f"datareel {__version__} (megatron-energon's tools)")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True, callback=_version)
@click.pass_context
def main(ctx: click.Context) -> None:
    """Energon's dataset tools, on datareel: prepare, inspect and check datasets."""
    if ctx.invoked_subcommand is None:
        click.echo(main.get_help(ctx))


for _command in (
    analyze_debug_command,
    checkpoint_command,
    info_command,
    lint_command,
    mount_command,
    prepare_command,
    prepare_media_command,
    preview_command,
):
    main.add_command(_command)

__all__ = [
    "analyze_debug_command",
    "checkpoint_command",
    "info_command",
    "lint_command",
    "main",
    "mount_command",
    "prepare_command",
    "prepare_media_command",
    "preview_command",
]

if __name__ == "__main__":
    main()
