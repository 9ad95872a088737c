"""``energon preview PATH``: print the samples of each split one by one, each field with its type, asking
to go on after each (datareel's reader: the samples training reads)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import click

from ...blend.open import open_dataset
from ...errors import DatasetError
from ..epathlib import EPath
from ._common import EPathType, as_click_errors, where

_HIDDEN = ("__restore_key__", "__subflavors__", "__sources__")


def _show(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"Tensor(shape={tuple(shape)}, dtype={value.dtype})"
    if isinstance(value, bytes):
        return f"bytes(length={len(value)}, value={value[:128]!r})"
    return repr(value)


def _fields(sample: Any) -> list[tuple[str, Any, Any]]:
    """``(name, declared type, value)`` of each field of a typed sample, or each part of a crude one."""
    if dataclasses.is_dataclass(sample):
        try:
            hints = typing.get_type_hints(type(sample))
        except (NameError, TypeError):
            hints = {}
        return [(f.name, hints.get(f.name, f.type), getattr(sample, f.name)) for f in dataclasses.fields(sample)]
    return [(name, type(value), value) for name, value in sample.items()]


@click.command(name="preview")
@click.argument("path", type=EPathType())
@click.option("--split-parts", default="train,val,test", help="The splits to show", show_default=True)
@click.option("--dataset-config", default="dataset.yaml", help="Dataset config file name", show_default=True)
def command(path: EPath, split_parts: str, dataset_config: str) -> None:
    """Show the samples of a prepared dataset on the console."""
    for split in split_parts.split(","):
        with as_click_errors():
            try:
                source = open_dataset(where(path), split=split, dataset_config=dataset_config)
            except DatasetError as exc:
                if f"split {split!r} is not in" in str(exc):
                    click.echo(f"Dataset {split} is empty. Skipping.")
                    continue
                raise
        try:
            for i in range(len(source)):
                with as_click_errors():
                    sample = source.read(i)
                click.echo(f"Sample {i}")
                for name, declared, value in _fields(sample):
                    if name not in _HIDDEN:
                        click.echo(f" - {name} ({declared}): {_show(value)}")
                click.confirm("Continue?", abort=True)
        except click.Abort:
            click.echo("Exiting Preview")


__all__ = ["command"]
