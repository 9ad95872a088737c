"""``energon prepare-media PATH``: media metadata for a folder of media files (a filesystem dataset, through
``datareel.energon.media.filesystem_prepare``) or for a prepared WebDataset (its shards indexed again with
the media filter: the shard indices, ``index.sqlite`` and its media tables are rewritten; ``.info.json``,
the splits and ``dataset.yaml`` stay)."""

from __future__ import annotations

import json

import click

from ...formats.webdataset.prepare_shards import meta_file_exists
from ..epathlib import EPath
from ..flavors.webdataset.config import INFO_JSON_FILENAME, MAIN_FOLDER_NAME
from ..flavors.webdataset.prepare import prepare_dataset
from ._common import EPathType, as_click_errors, media_filter, where


@click.command(name="prepare-media")
@click.argument("path", type=EPathType())
@click.option("--progress/--no-progress", default=True)
@click.option("--num-workers", type=int, default=16, help="indexing processes (at most)")
@click.option("--media-metadata-by-glob", type=str, help="media files by glob patterns, comma separated")
@click.option("--media-metadata-by-header", is_flag=True, help="media files by their header bytes")
@click.option("--media-metadata-by-extension", is_flag=True, help="media files by extension")
@click.option("--tmp-path", type=click.Path(), default=None, help="where index.sqlite is built for a remote PATH")
def command(
    path: EPath,
    progress: bool,
    num_workers: int,
    media_metadata_by_glob: str | None,
    media_metadata_by_header: bool,
    media_metadata_by_extension: bool,
    tmp_path: str | None,
) -> None:
    """Collect media metadata of a filesystem dataset or a prepared WebDataset."""
    media = media_filter(media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension)
    if media is None:
        raise click.UsageError(
            "pass --media-metadata-by-glob, --media-metadata-by-header or --media-metadata-by-extension"
        )
    built = None if tmp_path is None else f"{tmp_path}/index.sqlite"
    with as_click_errors():
        if meta_file_exists(where(path), INFO_JSON_FILENAME):
            click.echo("Preparing webdataset and computing media metadata...")
            shards = list(json.loads((path / MAIN_FOLDER_NAME / INFO_JSON_FILENAME).read_text())["shard_counts"])
            prepare_dataset(
                path, shards, tar_index_only=True, media_filter=media, workers=num_workers, index_sqlite_tmp_path=built
            )
            click.echo("Done.")
            return
        try:
            from ..media.filesystem_prepare import prepare_filesystem_dataset
        except ImportError as exc:
            raise click.ClickException(
                f"a filesystem dataset needs datareel.energon.media.filesystem_prepare ({exc}); not available"
            ) from None
        click.echo("Preparing filesystem dataset and computing media metadata...")
        stored = prepare_filesystem_dataset(
            path, media, progress=progress, workers=num_workers, index_sqlite_tmp_path=built
        )
    click.echo(f"Done. Stored metadata for {stored} files.")


__all__ = ["command"]
