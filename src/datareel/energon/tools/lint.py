"""``energon lint PATH``: read and decode every sample of the given splits, and name each one that fails
(datareel's reader, the one training uses; exit status 1 when any failed)."""

from __future__ import annotations

import click
from tqdm import tqdm

from ...blend.open import open_dataset
from ...errors import DatareelError, DatasetError
from ..epathlib import EPath
from ._common import EPathType, as_click_errors, where


@click.command(name="lint")
@click.argument("path", type=EPathType())
@click.option("--split-parts", default="train,val,test", help="The splits to verify", show_default=True)
@click.option("--dataset-config", default="dataset.yaml", help="Dataset config file name", show_default=True)
@click.option("--split-config", default="split.yaml", help="Split config file name", show_default=True)
@click.option("--parallel", default=1, help="(datareel reads in this process: 1 only)", show_default=True, type=int)
def command(path: EPath, split_parts: str, dataset_config: str, split_config: str, parallel: int) -> None:
    """Check that every sample of a prepared dataset reads and decodes."""
    if parallel != 1:
        raise click.ClickException(f"--parallel {parallel}: datareel's lint reads in one process; pass --parallel 1")
    failed: list[str] = []
    for split in split_parts.split(","):
        with as_click_errors():
            try:
                source = open_dataset(
                    where(path), split=split, split_config=split_config, dataset_config=dataset_config
                )
            except DatasetError as exc:
                if f"split {split!r} is not in" in str(exc):
                    click.echo(f"Skipping missing split part {split}")
                    continue
                raise
        if len(source) == 0:
            click.echo(f"Skipping empty split part {split}")
            continue
        for i in tqdm(range(len(source)), desc=split):
            try:
                source.read(i)
            except DatareelError as exc:
                failed.append(f"{split} sample {i}: {exc}")
    if failed:
        for item in failed:
            click.echo(f"- {item}", err=True)
        raise click.ClickException(f"Validation failed: {len(failed)} samples did not read, listed above.")
    click.echo("Done: every sample reads.")


__all__ = ["command"]
