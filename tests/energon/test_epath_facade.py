"""``datareel.energon.epathlib.EPath`` beside ``megatron.energon.epathlib.EPath``: the same strings, path
arithmetic, listings and file operations, locally and in a bucket (moto's S3 server through an MSC
profile); and datareel opens a dataset named by an EPath, local or remote."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import pytest
from megatron.energon.epathlib import EPath as Theirs

from datareel.energon.epathlib import DEFAULT_PROFILE_NAME, EPath
from datareel.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory


def _tree(root: Path) -> None:
    (root / "sub" / "deep").mkdir(parents=True)
    for rel in ("a.txt", "b.bin", "sub/c.txt", "sub/deep/d.txt", "sub/deep/e.bin"):
        (root / rel).write_text(rel)
    (root / "link").symlink_to(root / "sub", target_is_directory=True)


PATTERNS = ["*.txt", "**/*.txt", "sub/*.txt", "sub/**/*.bin", "[ab].*", "**/deep/?.txt", "link/*"]


def test_local_paths_match_energon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    for text in ("sub/../a.txt", "./sub/deep", str(tmp_path / "x/./y/.."), f"msc://{DEFAULT_PROFILE_NAME}{tmp_path}"):
        ours, theirs = EPath(text), Theirs(text)
        assert (str(ours), ours.url, ours.name, str(ours.parent)) == (
            str(theirs),
            theirs.url,
            theirs.name,
            str(theirs.parent),
        )
        assert str(ours / "q/../r.tar") == str(theirs / "q/../r.tar")
        assert str(ours.with_suffix(".idx")) == str(theirs.with_suffix(".idx"))
    root, other = EPath(tmp_path), Theirs(tmp_path)
    for pattern in PATTERNS:
        assert [str(p) for p in sorted(root.glob(pattern))] == [str(p) for p in sorted(other.glob(pattern))], pattern
    assert [p.relative_to(root) for p in sorted(root.walk())] == [p.relative_to(other) for p in sorted(other.walk())]
    for rel in ("a.txt", "sub", "missing"):
        ours, theirs = root / rel, other / rel
        assert (ours.is_file(), ours.is_dir()) == (theirs.is_file(), theirs.is_dir())
    assert (root / "a.txt").size() == (other / "a.txt").size() == 5
    assert (root / "a.txt").stat().content_length == 5
    restored = pickle.loads(pickle.dumps(root / "a.txt"))
    assert restored == root / "a.txt" and restored.read_text() == "a.txt"
    with pytest.raises(ValueError, match="above root"):
        EPath("/a/../../b")
    with pytest.raises(AssertionError, match="version separated by '@'"):
        EPath("dss://name-without-version")


def test_local_file_operations(tmp_path: Path) -> None:
    target = EPath(tmp_path) / "new" / "folder" / "f.txt"
    target.write_text("hello")  # parents made, as Energon's MSC backend makes them
    assert target.read_bytes() == b"hello"
    with target.open("rb") as f:
        assert f.read(2) == b"he"
    moved = target.parent / "g.txt"
    target.move(moved)
    assert moved.is_file() and not target.is_file()
    assert Path(moved) == tmp_path / "new" / "folder" / "g.txt"  # os.fspath of a local EPath
    moved.unlink()
    assert not moved.is_file()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    import boto3

    from s3_server import s3_server

    with s3_server() as endpoint:
        boto3.client("s3").create_bucket(Bucket="epath")
        config = tmp_path_factory.mktemp("msc") / "msc.yaml"
        config.write_text(
            "profiles:\n  epathtest:\n    storage_provider:\n      type: s3\n      options:\n"
            f"        base_path: epath\n        endpoint_url: {endpoint}\n        region_name: us-east-1\n"
        )
        saved = os.environ.get("MSC_CONFIG")
        os.environ["MSC_CONFIG"] = str(config)
        try:
            yield "msc://epathtest"
        finally:
            if saved is None:
                os.environ.pop("MSC_CONFIG", None)
            else:
                os.environ["MSC_CONFIG"] = saved


def test_remote_paths_match_energon(bucket: str, tmp_path: Path) -> None:
    _tree(tmp_path)
    ours, theirs = EPath(f"{bucket}/ours"), Theirs(f"{bucket}/theirs")
    for rel in ("a.txt", "b.bin", "sub/c.txt", "sub/deep/d.txt", "sub/deep/e.bin"):
        EPath(tmp_path / rel).copy(ours / rel)
        Theirs(tmp_path / rel).copy(theirs / rel)
    assert str(ours / "sub") == f"{bucket}/ours/sub" and not ours.is_local()
    for pattern in PATTERNS[:-1]:
        assert [p.relative_to(ours) for p in sorted(ours.glob(pattern))] == [
            p.relative_to(theirs) for p in sorted(theirs.glob(pattern))
        ], pattern
    assert [p.relative_to(ours) for p in sorted(ours.walk())] == [p.relative_to(theirs) for p in sorted(theirs.walk())]
    for rel in ("a.txt", "sub", "missing"):
        assert ((ours / rel).is_file(), (ours / rel).is_dir()) == ((theirs / rel).is_file(), (theirs / rel).is_dir())
    assert (ours / "sub/c.txt").read_text() == (theirs / "sub/c.txt").read_text() == "sub/c.txt"
    with (ours / "sub/deep/d.txt").open("rb") as f:
        f.seek(4)
        assert f.read() == b"deep/d.txt"
    assert (ours / "a.txt").stat().content_length == (theirs / "a.txt").stat().content_length == 5
    assert (ours / "a.txt").stat().last_modified is not None
    (ours / "a.txt").copy(EPath(tmp_path / "back.txt"))
    assert (tmp_path / "back.txt").read_text() == "a.txt"
    (ours / "b.bin").move(ours / "moved.bin")
    assert not (ours / "b.bin").is_file() and (ours / "moved.bin").read_bytes() == b"b.bin"
    assert b"epathtest" in pickle.dumps(ours) and b"testing" not in pickle.dumps(ours)  # the profile, no secrets
    with pytest.raises(TypeError, match="not a local file"):
        open(ours / "a.txt")


def _dataset(root: Path) -> None:
    (root / "parts").mkdir(parents=True)
    with tarfile.open(root / "parts" / "data-0.tar", "w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"k{i}.txt")
            info.size = 1
            tar.addfile(info, io.BytesIO(str(i).encode()))
    BaseWebdatasetFactory.prepare_dataset(root, ["parts/data-0.tar"], split_parts_ratio=[("train", 1.0)])
    (root / ".nv-meta" / "dataset.yaml").write_text("__module__: megatron.energon\n__class__: CrudeWebdataset\n")


def test_datareel_opens_an_epath_local_and_remote(bucket: str, tmp_path: Path) -> None:
    import datareel

    _dataset(tmp_path / "ds")
    local = datareel.open_dataset(EPath(tmp_path / "ds"))
    assert [local.key(i) for i in range(len(local))] == ["k0", "k1", "k2"]
    EPath(tmp_path / "ds").copy(EPath(f"{bucket}/ds"))
    remote = datareel.open_dataset(EPath(f"{bucket}/ds"))
    assert [remote.read(i)["txt"] for i in range(len(remote))] == ["0", "1", "2"]


def test_dss_paths_resolve_through_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import megatron.energon.epathlib.epath as theirs_module

    import datareel
    import datareel.energon.epathlib.epath as ours_module

    _dataset(tmp_path / "cache" / "name" / "v1")
    monkeypatch.setattr(ours_module, "NVDATASET_CACHE_DIR", EPath(tmp_path / "cache"))
    monkeypatch.setattr(theirs_module, "NVDATASET_CACHE_DIR", Theirs(tmp_path / "cache"))
    ours, theirs = EPath("dss://name@v1"), Theirs("dss://name@v1")
    assert (str(ours), ours.url, ours.local_path(), ours.display_name) == (
        str(theirs),
        theirs.url,
        theirs.local_path(),
        theirs.display_name,
    )
    assert [str(p) for p in sorted(ours.glob("**/*.tar"))] == [str(p) for p in sorted(theirs.glob("**/*.tar"))]
    assert len(datareel.open_dataset(ours)) == len(datareel.open_dataset("dss://name@v1")) == 3
    (tmp_path / "mds.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: dss://name@v1\n"
    )
    assert len(datareel.open_dataset(tmp_path / "mds.yaml")) == 3
