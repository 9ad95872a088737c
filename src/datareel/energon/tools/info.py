"""``energon info PATH``: a prepared dataset's samples, shards, size, sample type and splits, from
datareel's :func:`datareel.cli.info.dataset_info` (the same facts ``datareel info`` shows)."""

from __future__ import annotations

import click

from ...cli.info import _size, dataset_info
from ..epathlib import EPath
from ._common import EPathType, as_click_errors, where

_ORDER = ("train", "val", "test")


@click.command(name="info")
@click.argument("path", type=EPathType())
@click.option("--split-config", default="split.yaml", help="Split config file name", show_default=True)
@click.option("--dataset-config", default="dataset.yaml", help="Dataset config file name", show_default=True)
def command(path: EPath, split_config: str, dataset_config: str) -> None:
    """Summarise a prepared dataset."""
    if (split_config, dataset_config) != ("split.yaml", "dataset.yaml"):
        raise click.ClickException(
            "--split-config / --dataset-config: datareel's info describes the dataset as prepared (split.yaml, "
            "dataset.yaml); open other configs with datareel.open_dataset(split_config=..., dataset_config=...)"
        )
    with as_click_errors():
        info = dataset_info(where(path))
    if info.get("kind") != "webdataset" and "splits" not in info:
        raise click.ClickException(f"{path}: energon info describes prepared WebDatasets; this is {info.get('kind')}")
    total = info["samples"]
    click.echo(f"Dataset {path.name} ({path})")
    click.echo(f"  {total:,} samples, {_size(info['bytes'])}, in {info['shards']:,} shards")
    click.echo(f"  sample type: {info['sample_type']}")
    click.echo("  splits:")
    ranked = sorted(info["splits"].items(), key=lambda kv: _ORDER.index(kv[0]) if kv[0] in _ORDER else 3)
    for name, split in ranked:
        share = 100 * split["samples"] / total if total else 0.0
        click.echo(f"    {name}: {share:.0f}%, {split['samples']:,} samples in {split['shards']} shards")


__all__ = ["command"]
