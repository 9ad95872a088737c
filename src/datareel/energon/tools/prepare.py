"""``energon prepare PATH``: index a WebDataset (local or in a store) with Energon's options and questions,
on datareel's writer (:func:`datareel.energon.flavors.webdataset.prepare.prepare_dataset`), then write
``dataset.yaml``; a ``.jsonl`` file gets its ``.jsonl.idx``, a metadataset YAML is handed to
``prepare_metadataset``.

Differences, each refused by name rather than dropped: datareel runs no code from a dataset folder, so a
typed sample type needs ``--field-map`` (Energon would write a ``sample_loader.py`` template instead); a
field map with ``CrudeWebdataset`` is an error (Energon ignores it)."""

from __future__ import annotations

import dataclasses
import json
import re
import typing

import click

from ...formats.jsonl.prepare import prepare_jsonl
from ...formats.webdataset.prepare_shards import meta_file_exists, write_meta_file
from ...formats.webdataset.scan import dataset_yaml
from ...sources.fieldmap import CRUDE
from ..epathlib import EPath
from ..flavors.webdataset.config import INFO_JSON_FILENAME, INFO_YAML_FILENAME, MAIN_FOLDER_NAME
from ..flavors.webdataset.prepare import prepare_dataset
from ._common import EPathType, as_click_errors, media_filter, where

#: The sample types Energon 7.4.1's wizard offers, in its order (the numbers one types), then crude samples.
MENU = [
    "CaptioningSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "Sample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQASample",
    "VidQASample",
    CRUDE,
]
_HIDDEN_FIELDS = ("__key__", "__restore_key__", "__subflavors__", "__sources__")


@click.command(name="prepare")
@click.argument("path", type=EPathType())
@click.option("--progress/--no-progress", default=True)
@click.option("--split-parts", multiple=True, default=None, help="'split:pattern' (regex, braces expanded)")
@click.option("--exclude", help="leave out shard paths matching this regex (anywhere in the path)")
@click.option("--num-workers", type=int, default=16, help="indexing processes (at most)")
@click.option("--tar-index-only", is_flag=True, help="only (re)write the shard indices")
@click.option("--shuffle-tars", is_flag=True, help="shuffle the shards (seed 42) before cutting the splits")
@click.option("--media-metadata-by-glob", type=str, help="media files by glob patterns, comma separated")
@click.option("--media-metadata-by-header", is_flag=True, help="media files by their header bytes")
@click.option("--media-metadata-by-extension", is_flag=True, help="media files by extension")
@click.option("--fix-duplicates", is_flag=True, help="(refused: datareel does not rewrite shards)")
@click.option("--non-interactive", is_flag=True, help="ask nothing")
@click.option("--split-ratio", default=None, help="train,val,test shares, e.g. 8,1,1")
@click.option("--force-overwrite", is_flag=True, help="prepare again without asking")
@click.option("--skip-dataset-yaml", is_flag=True, help="write no dataset.yaml")
@click.option("--dataset-yaml-name", default="dataset.yaml", type=str, help="the dataset.yaml to write")
@click.option("--sample-type", default=None, help="sample type class name, or CrudeWebdataset")
@click.option("--field-map", default=None, help='JSON field map, e.g. {"image": "jpg", "caption": "txt"}')
@click.option("--tmp-path", type=click.Path(), default=None, help="where index.sqlite is built for a remote PATH")
def command(
    path: EPath,
    progress: bool,
    split_parts: tuple[str, ...],
    exclude: str | None,
    num_workers: int,
    tar_index_only: bool,
    shuffle_tars: bool,
    media_metadata_by_glob: str | None,
    media_metadata_by_header: bool,
    media_metadata_by_extension: bool,
    fix_duplicates: bool,
    non_interactive: bool,
    split_ratio: str | None,
    force_overwrite: bool,
    skip_dataset_yaml: bool,
    dataset_yaml_name: str,
    sample_type: str | None,
    field_map: str | None,
    tmp_path: str | None,
) -> None:
    """Prepare a WebDataset (a folder of .tar shards), a .jsonl file or a metadataset YAML for loading."""
    media = media_filter(media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension)
    if media is not None and tar_index_only:
        raise click.UsageError("--media-metadata-by-... cannot be combined with --tar-index-only")
    with as_click_errors():
        if path.name.endswith(".jsonl"):
            if media is not None:
                raise click.ClickException("JSONL datasets hold no media metadata; remove --media-metadata-by-...")
            click.echo("Preparing jsonl dataset...")
            click.echo(f"Done. Found {prepare_jsonl(where(path))} samples.")
            return
        if path.name.endswith((".yaml", ".yml")) and path.is_file():
            from ..metadataset import prepare_metadataset

            click.echo("Preparing metadataset...")
            prepare_metadataset(path)
            return
        if not path.is_dir():
            raise click.ClickException(f"{path} is neither a folder of .tar shards, a .jsonl file nor a YAML")
        shards = _shards(path, tar_index_only, force_overwrite, non_interactive)
        if shards is None:
            return
        if exclude:
            shards = [s for s in shards if not re.search(exclude, s)]
        if not shards:
            click.echo("Did not find any tar files. Exiting.")
            return
        if not tar_index_only:
            click.echo(f"Found {len(shards)} tar files in total. The first and last ones are:")
            click.echo(f"- {shards[0]}\n- {shards[-1]}")
        ratio, patterns = None, None
        if split_parts:
            patterns = [tuple(x.split(":", 1)) for x in split_parts]
        elif not tar_index_only:
            ratio = _ratio(split_ratio, non_interactive)
            if ratio is None:
                return
        found = prepare_dataset(
            path,
            shards,
            split_parts_ratio=ratio,
            split_parts_patterns=patterns,
            progress_fn=_progress if progress else (lambda items, total: items),
            tar_index_only=tar_index_only,
            shuffle_seed=42 if shuffle_tars else None,
            workers=num_workers,
            media_filter=media,
            fix_duplicates=fix_duplicates,
            index_sqlite_tmp_path=None if tmp_path is None else f"{tmp_path}/index.sqlite",
        )
        if tar_index_only:
            return
        parts = sorted(found)
        click.echo(f"Found the following part types in the dataset: {', '.join(parts)}")
        config = _dataset_config(parts, skip_dataset_yaml, sample_type, field_map, non_interactive)
        if config is None:
            click.echo("You will have to add a dataset.yaml manually.")
        else:
            import yaml

            write_meta_file(where(path), dataset_yaml_name, yaml.safe_dump(config, sort_keys=False))
    click.echo("Done")


def _progress(items, total):
    with click.progressbar(items, label="Indexing shards", show_pos=True, length=total) as bar:
        yield from bar


def _shards(path: EPath, tar_index_only: bool, force: bool, non_interactive: bool) -> list[str] | None:
    """The shards to index (``None``: the user stopped): those ``.info.json`` lists with
    ``--tar-index-only``, else every ``.tar`` / ``.tgz`` under ``path``."""
    root = where(path)
    if tar_index_only:
        name = INFO_JSON_FILENAME if meta_file_exists(root, INFO_JSON_FILENAME) else INFO_YAML_FILENAME
        import yaml

        return list(yaml.safe_load((path / MAIN_FOLDER_NAME / name).read_text())["shard_counts"])
    if meta_file_exists(root, INFO_JSON_FILENAME) or meta_file_exists(root, INFO_YAML_FILENAME):
        if non_interactive and not force:
            raise click.ClickException("Dataset has already been prepared. Use --force-overwrite to overwrite.")
        if not force and not click.confirm("It seems the dataset had already been prepared. Do you want to continue?"):
            return None
    found = [*path.glob("**/*.tar"), *path.glob("**/*.tgz")]
    return [p.relative_to(path) for p in sorted(found) if f"/{MAIN_FOLDER_NAME}/" not in f"/{p.relative_to(path)}"]


def _ratio(text: str | None, non_interactive: bool) -> list[tuple[str, float]] | None:
    if text is None:
        if non_interactive:
            raise click.ClickException(
                "--split-ratio is required in non-interactive mode (unless --split-parts or --tar-index-only is used)."
            )
        text = click.prompt('Please enter a desired train/val/test split like "0.5, 0.2, 0.3" or "8,1,1"', type=str)
    try:
        shares = [float(x.strip()) for x in text.split(",")]
    except ValueError:
        shares = []
    if len(shares) != 3:
        click.echo("Invalid split. Stopping.")
        return None
    return list(zip(("train", "val", "test"), shares))


def _dataset_config(parts, skip, sample_type, field_map, non_interactive) -> dict | None:
    """The dataset.yaml to write (``None``: none), asked for unless given on the command line."""
    if skip or (sample_type is None and non_interactive):
        return None
    if sample_type is None and not click.confirm("Do you want to create a dataset.yaml interactively?", default=True):
        return None
    if sample_type is None:
        click.echo("The following sample types are available:")
        for i, name in enumerate(MENU):
            click.echo(f"{i}. {'Crude sample (plain dict for cooking)' if name == CRUDE else name}")
        while True:
            choice = click.prompt("Please enter a number to choose a class", type=int)
            if 0 <= choice < len(MENU):
                sample_type = MENU[choice]
                break
            click.echo("Invalid choice. Please try again.")
    if sample_type == CRUDE:
        return dataset_yaml(CRUDE, json.loads(field_map) if field_map else None)
    if field_map is not None:
        try:
            fields = json.loads(field_map)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"Invalid JSON in --field-map: {exc}") from None
    elif non_interactive or not click.confirm(
        "Do you want to set a simple field_map[Y] (or write your own sample_loader [n])?", default=True
    ):
        raise click.ClickException(
            f"a {sample_type} dataset.yaml needs a field map (--field-map): datareel runs no sample_loader.py "
            f"from a dataset folder; or use --sample-type {CRUDE} and a cooker in the task encoder"
        )
    else:
        fields = _ask_fields(sample_type, parts)
    return dataset_yaml(sample_type, fields)


def _ask_fields(sample_type: str, parts: list[str]) -> dict[str, str]:
    """The field map, one question per field of the sample type (blank keeps an optional field's default)."""
    from ...sources import typed

    cls = getattr(typed, sample_type, None)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise click.ClickException(f"sample type {sample_type!r} has no fields to map; pick another")
    hints = typing.get_type_hints(cls)
    click.echo(f"Available types in WebDataset: {', '.join(parts)}")
    out: dict[str, str] = {}
    for field in dataclasses.fields(cls):
        if field.name in _HIDDEN_FIELDS:
            continue
        optional = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        while True:
            answer = input(f"Please enter a webdataset field name for '{field.name}' ({hints.get(field.name)}): ")
            if not answer and optional:
                break
            if answer and all(option.split("[", 1)[0] in parts for option in answer.split(",")):
                out[field.name] = answer
                break
            click.echo("That type doesn't exist in the WebDataset. Please try again.")
    return out


__all__ = ["MENU", "command"]
