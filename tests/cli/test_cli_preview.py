"""``datareel preview``: fields, types and excerpts of chosen samples; image parts saved as the decoded
pixels, and a contact sheet; bad choices refused naming the range or the key."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from datareel.cli import main
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import build_shards, sample_parts


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview")
    build_shards(root, shard_sizes=(3, 2), long_names=False)
    prepare_webdataset(root, progress=False)
    return root


def run(capsys, *args):
    code = main(["preview", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fields_types_and_excerpts(shards, capsys):
    code, out, _ = run(capsys, shards, "--index", 1, "--index", 4)
    assert code == 0
    assert "sample 1 (key 's00001')" in out and "sample 4 (key 's00004')" in out
    assert "txt              bytes      25 bytes: 'sample number 1 ünïcode'" in out
    assert "png              bytes      " in out
    code, out, _ = run(capsys, shards, "--key", "s00003", "--decode", "--json")
    (sample,) = json.loads(out)["samples"]
    fields = {name: (kind, summary) for name, kind, summary in sample["fields"]}
    assert sample["index"] == 3 and fields["npy"] == ("ndarray", "float32 [2, 3]")
    assert fields["txt"] == ("str", "'sample number 3 ünïcode'") and fields["png"] == ("Tensor", "float32 [3, 6, 5]")
    code, out, _ = run(capsys, shards, "--count", 2)
    assert code == 0 and [line.split(" (")[0] for line in out.splitlines() if line.startswith("sample ")] == [
        "sample 0",
        "sample 1",
    ]


def test_images_are_saved_as_decoded_and_a_contact_sheet_is_drawn(shards, tmp_path, capsys):
    out_dir = tmp_path / "images"
    code, out, _ = run(capsys, shards, "--decode", "--count", 5, "--out", out_dir, "--json")
    written = json.loads(out)["written"]
    assert code == 0 and len(written) == 6 and written[-1].endswith("contact.png")
    for i in range(5):
        expected = np.asarray(Image.open(io.BytesIO(sample_parts(i)["png"])).convert("RGB"))
        assert np.array_equal(np.asarray(Image.open(out_dir / f"{i:06d}-png.png")), expected)
    sheet = np.asarray(Image.open(out_dir / "contact.png").convert("RGB"))
    assert sheet.shape == (128 + 14, 5 * 128, 3)
    assert (sheet < 250).any(axis=2).mean() > 0.5  # mostly thumbnails, not blank paper


def test_bad_choices_are_refused(shards, tmp_path, capsys):
    code, _, err = run(capsys, shards, "--index", 5)
    assert code == 1 and "--index 5 is out of range" in err and "(0 to 4)" in err
    code, _, err = run(capsys, shards, "--key", "nope")
    assert code == 1 and "has key 'nope'" in err
    yaml_path = tmp_path / "blend.yaml"
    yaml_path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 1\n        path: {shards}\n"
    )
    code, _, err = run(capsys, yaml_path)
    assert code == 1 and "is a blend" in err


def test_typed_samples_and_jsonl(tmp_path, capsys):
    build_shards(tmp_path, shard_sizes=(2,), long_names=False)
    prepare_webdataset(tmp_path, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"},
                       progress=False)  # fmt: skip
    code, out, _ = run(capsys, tmp_path, "--decode", "--index", 1, "--json")
    fields = {name: kind for name, kind, _ in json.loads(out)["samples"][0]["fields"]}
    assert code == 0 and fields["caption"] == "str" and fields["image"] == "Tensor" and "__key__" in fields
    lines = tmp_path / "docs.jsonl"
    lines.write_text('{"text": "first"}\n{"text": "second"}\n')
    assert main(["prepare", str(lines)]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, lines, "--index", 1)
    assert code == 0 and "second" in out


@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_the_images_written_are_counted_without_their_contact_sheet(shards, tmp_path, capsys, decode, count):
    """`preview --out` said "wrote 6 image file(s)" for 5 images: the contact sheet is named as such, not
    counted as an image, in the text and in the JSON (raw bytes or decoded; one image has no sheet)."""
    out_dir = tmp_path / "images"
    flags = ["--decode"] if decode else []
    code, out, _ = run(capsys, shards, *flags, "--count", count, "--out", out_dir)
    (line,) = [line for line in out.splitlines() if line.startswith("wrote ")]
    images = [out_dir / f"{i:06d}-png.png" for i in range(count)]
    listed = ", ".join(map(str, images[:4])) + (", ..." if count > 4 else "")
    sheet = f" and their contact sheet {out_dir / 'contact.png'}" if count > 1 else ""
    assert code == 0 and line == f"wrote {count} image{'s' if count > 1 else ''} ({listed}){sheet}"
    code, out, _ = run(capsys, shards, *flags, "--count", count, "--out", out_dir, "--json")
    printed = json.loads(out)
    assert printed["images"] == [str(p) for p in images]
    assert printed["contact_sheet"] == (str(out_dir / "contact.png") if count > 1 else None)
    assert printed["written"] == printed["images"] + ([printed["contact_sheet"]] if count > 1 else [])
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        [p.name for p in images] + (["contact.png"] if count > 1 else [])
    )
