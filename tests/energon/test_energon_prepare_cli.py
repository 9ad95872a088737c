"""``datareel.energon.tools`` (``energon prepare / info / preview / lint``) beside megatron.energon's tools on
the same dataset: the same exit codes, the facts their output states, the same ``dataset.yaml``; and the
tools datareel lacks stop with exit 1 naming why."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from PIL import Image

from datareel.energon.flavors.webdataset.prepare import prepare_dataset


def _captioning(root: Path, samples: int = 50, per_shard: int = 30) -> None:
    """Shards of ``per_shard`` samples (png, txt, json), prepared with Energon's default shuffle seed."""
    (root / "parts").mkdir(parents=True)
    rng = np.random.default_rng(0)
    shards = (samples + per_shard - 1) // per_shard
    for s in range(shards):
        with tarfile.open(root / f"parts/data-{s}.tar", "w") as tar:
            for idx in range(s * per_shard, min(samples, (s + 1) * per_shard)):
                png = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(png, format="PNG")
                caption = f"caption {idx}"
                for ext, data in (
                    ("png", png.getvalue()),
                    ("txt", caption.encode()),
                    ("json", json.dumps({"c": caption}).encode()),
                ):
                    info = tarfile.TarInfo(f"{idx:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    prepare_dataset(root, [f"parts/data-{{0..{shards - 1}}}.tar"], split_parts_ratio=[("train", 1.0)])
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
        "field_map:\n  image: png\n  caption: txt\n"
    )


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    _captioning(tmp_path / "ds")
    return tmp_path / "ds"


def _both(name: str):
    import importlib

    return (
        importlib.import_module(f"datareel.energon.tools.{name}").command,
        importlib.import_module(f"megatron.energon.tools.{name}").command,
    )


def test_info_preview_lint_beside_energon(dataset: Path) -> None:
    runner = CliRunner()
    for ours_or_theirs in _both("info"):
        result = runner.invoke(ours_or_theirs, [str(dataset)], catch_exceptions=False)
        assert result.exit_code == 0
        for fact in ("50 samples", "2 shards", str(dataset), "train"):
            assert fact in result.stdout
    for ours_or_theirs in _both("preview"):
        result = runner.invoke(
            ours_or_theirs, [str(dataset), "--split-parts=train"], input="n\n", catch_exceptions=False
        )
        assert result.exit_code == 0
        assert "__key__ (<class 'str'>): '000030'" in result.stdout  # the first sample of the split
    ours, _ = _both("lint")
    assert runner.invoke(ours, [str(dataset), "--split-parts=train"], catch_exceptions=False).exit_code == 0


@pytest.mark.workers  # real Energon's prepare starts its indexing processes
@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        ([], "y\n1,0,0\ny\n0\nY\npng\ntxt\n"),
        (
            [
                "--non-interactive",
                "--force-overwrite",
                "--split-ratio=1,0,0",
                "--sample-type=CaptioningSample",
                '--field-map={"image": "png", "caption": "txt"}',
            ],
            None,
        ),
        (["--non-interactive", "--force-overwrite", "--split-ratio=1,0,0", "--sample-type=CrudeWebdataset"], None),
    ],
)
def test_prepare_command_beside_energon(dataset: Path, args: list[str], stdin: str | None) -> None:
    runner = CliRunner()
    theirs_path = dataset.parent / "theirs"
    shutil.copytree(dataset, theirs_path)
    written = {}
    for command, path in zip(_both("prepare"), (dataset, theirs_path)):
        result = runner.invoke(command, [str(path), *args], input=stdin, catch_exceptions=False)
        assert result.exit_code == 0, result.stdout
        assert "Done" in result.stdout
        written[path] = yaml.safe_load((path / ".nv-meta" / "dataset.yaml").read_text())
        refused = runner.invoke(command, [str(path), "--non-interactive"], catch_exceptions=True)
        assert refused.exit_code == 1  # prepared already, and no --force-overwrite
    assert written[dataset] == written[theirs_path]


def test_prepare_command_on_jsonl_and_refusals(tmp_path: Path) -> None:
    from datareel.energon.cli.main import analyze_debug_command, checkpoint_command, main, prepare_command

    path = tmp_path / "ds.jsonl"
    path.write_text("".join(json.dumps({"idx": i}) + "\n\n" for i in range(10)))
    runner = CliRunner()
    result = runner.invoke(prepare_command, [str(path)], catch_exceptions=False)
    assert result.exit_code == 0 and "Found 10 samples" in result.stdout and "Done" in result.stdout
    assert (tmp_path / "ds.jsonl.idx").exists()
    for command, args in ((analyze_debug_command, [str(tmp_path)]), (checkpoint_command, ["redist", "x"])):
        result = runner.invoke(command, args)
        assert result.exit_code == 1 and "not available through datareel" in result.output
    assert "prepare" in runner.invoke(main, []).output
