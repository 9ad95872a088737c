"""``datareel prepare`` on hostile input (issue 12, first part): one writer, an atomic ``--overwrite``,
clear errors from the CLI, JSONL and member names training could not read refused naming the line or the
bytes. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import io
import tarfile

import pytest
import yaml

import datareel
from wds_helpers import prepared_shard


def test_a_sample_holding_a_part_twice_is_refused_by_prepare_and_by_the_reader(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    def shard(path, members):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    shard(tmp_path / "a" / "d.tar", [("k0.txt", b"one"), ("k0.txt", b"two"), ("k1.txt", b"x")])
    with pytest.raises(datareel.DatasetError, match=r"sample 'k0' holds part 'txt' twice"):
        prepare_webdataset(tmp_path / "a", progress=False)
    # a shard changed after it was prepared (same byte ranges): the reader refuses too
    write_shard(tmp_path / "b" / "d.tar", [("k0", {"txt": b"one", "json": b"{}"}), ("k1", {"txt": b"x"})])
    prepare_webdataset(tmp_path / "b", progress=False)
    shard(tmp_path / "b" / "d.tar", [("k0.txt", b"one"), ("k0.txt", b"{}"), ("k1.txt", b"x")])
    dataset = datareel.open_dataset(tmp_path / "b")
    with pytest.raises(datareel.DatasetError, match=r"holds part 'txt' twice"):
        dataset.read(0)


# -- prepare: one writer, an atomic --overwrite, clear errors from the CLI ----------------------------


def test_a_second_prepare_on_the_same_directory_is_refused_while_the_first_runs(tmp_path):
    from datareel.cli.atomic import locked
    from datareel.cli.prepare import prepare_webdataset

    root = prepared_shard(tmp_path)
    with locked(root, "a test standing in for another prepare"):  # a separate lock, as another process holds
        with pytest.raises(datareel.DatasetError, match=r"another process is already writing into"):
            prepare_webdataset(root, overwrite=True, progress=False)
    prepare_webdataset(root, overwrite=True, progress=False)  # free again once the holder is gone


def test_overwrite_swaps_the_metadata_atomically_and_keeps_the_length_index(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from datareel.storage import atomic

    root = prepared_shard(tmp_path)
    (root / ".nv-meta" / "lengths.npy").write_bytes(b"kept")
    before = (root / ".nv-meta" / "index.uuid").read_text()
    prepare_webdataset(root, overwrite=True, progress=False)
    assert (root / ".nv-meta" / "index.uuid").read_text() != before
    assert (root / ".nv-meta" / "lengths.npy").read_bytes() == b"kept"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".nv-meta")) == [".nv-meta"]
    a, b = tmp_path / "x", tmp_path / "y"
    a.mkdir(), b.mkdir(), (a / "in-a").touch()
    assert atomic._exchange(a, b) and (b / "in-a").exists()  # one step on this filesystem: no gap


def test_a_kill_in_the_middle_of_a_non_atomic_swap_is_named_and_recovered(tmp_path, monkeypatch):
    """Where the kernel cannot exchange, the old metadata is renamed aside first; a kill right then
    leaves no .nv-meta. Reading names the leftover; prepare recovers it (and its length index)."""
    from datareel.cli.prepare import prepare_webdataset
    from datareel.storage import atomic

    root = prepared_shard(tmp_path)
    (root / ".nv-meta" / "lengths.npy").write_bytes(b"kept")
    replace = atomic.os.replace

    def killed_after_the_first_rename(src, dst):
        if str(dst).endswith(".nv-meta") and ".tmp-" in str(src):  # the old one is already aside
            raise KeyboardInterrupt  # the kill
        return replace(src, dst)

    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    monkeypatch.setattr(atomic.os, "replace", killed_after_the_first_rename)
    with pytest.raises(KeyboardInterrupt):
        prepare_webdataset(root, overwrite=True, progress=False)
    monkeypatch.undo()
    assert not (root / ".nv-meta").exists()
    with pytest.raises(datareel.DatasetError, match=r"interrupted `datareel prepare --overwrite` left the old"):
        datareel.open_dataset(root)
    with pytest.raises(datareel.DatasetError, match=r"rename it back to \.nv-meta, or pass --overwrite"):
        prepare_webdataset(root, progress=False)
    prepare_webdataset(root, overwrite=True, progress=False)
    assert (root / ".nv-meta" / "lengths.npy").read_bytes() == b"kept"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".nv-meta")) == [".nv-meta"]
    assert len(datareel.open_dataset(root)) == 3


def test_an_unwritable_dataset_directory_is_a_named_error(tmp_path, monkeypatch):
    from datareel.cli import prepare
    from wds_helpers import write_shard

    write_shard(tmp_path / "a-0.tar", [("k", {"txt": b"x"})])

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")  # chmod does not stop root, who runs CI

    monkeypatch.setattr(prepare.tempfile, "mkdtemp", read_only)
    with pytest.raises(datareel.DatasetError, match=r"Permission denied; `datareel prepare` writes .*needs write"):
        prepare.prepare_webdataset(tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-0.tar"]


@pytest.mark.parametrize(
    "argv,first_words",
    [
        (["prepare", "{missing}"], "datareel prepare: error: {missing} is not a directory"),
        (["info", "{missing}"], "datareel info: error:"),
        (["prepare", "{root}"], "datareel prepare: error: {root}/.nv-meta already exists"),
    ],
)
def test_the_cli_prints_one_line_for_an_expected_error_and_a_traceback_with_debug(tmp_path, capsys, argv, first_words):
    from datareel.cli import main

    root = prepared_shard(tmp_path / "ds")
    names = {"missing": str(tmp_path / "nothing-here"), "root": str(root)}
    argv = [a.format(**names) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(first_words.format(**names)) and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2
    with pytest.raises((datareel.DatareelError, OSError)):
        main(["--debug", *argv])


# -- JSONL: what prepares, reads ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,named",
    [
        (b'{"a": 1}\n{bad}\n', r"line 2: not one valid JSON object"),
        (b'{"a": 1}{"b": 2}\n', r"line 1: .*Extra data.*two on one line"),
        (b'{"a": 1}\r{"b": 2}\r', r"line 1: .*carriage return inside the line"),
        (b'{"a": 1}\n\x0c\n{"b": 2}\n', r"line 1: .*form feed"),
        (b'\xef\xbb\xbf{"a": 1}\n', r"line 1: .*byte-order mark"),
        (b'{"a": "\xff"}\n', r"line 1: not valid UTF-8"),
    ],
    ids=["not json", "two objects", "CR-only", "form feed", "BOM", "not utf-8"],
)
def test_jsonl_prepare_refuses_what_training_could_not_read_naming_the_line(tmp_path, content, named):
    from datareel.cli.prepare import prepare_jsonl

    path = tmp_path / "data.jsonl"
    path.write_bytes(content)
    with pytest.raises(datareel.DatasetError, match=named):
        prepare_jsonl(path)
    assert not (tmp_path / "data.jsonl.idx").exists()


def test_a_member_name_that_is_not_utf8_is_refused_by_prepare_naming_its_bytes(tmp_path):
    from datareel.cli.prepare import prepare_webdataset

    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for name in ["ok.txt", "caf\xe9.txt"]:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(datareel.DatasetError, match=r"member name b'caf\\xe9.txt' \(header at byte 1024\)"):
        prepare_webdataset(tmp_path, progress=False)


def test_long_metadata_written_out_in_full_is_not_refused_for_its_size(tmp_path):
    """The alias bound counts only values reached again through an alias: a split of 150,000 shards
    written out (JSON or YAML) loads; only expansion is refused."""
    import json

    from datareel.sources.energon_meta import load_file

    counts = {f"part-{i:06d}.tar": 3 for i in range(150_000)}
    (tmp_path / "info.json").write_text(json.dumps({"shard_counts": counts}))
    (tmp_path / "split.yaml").write_text(yaml.safe_dump({"split_parts": {"train": list(counts)}}))
    assert len(load_file(tmp_path / "info.json")["shard_counts"]) == 150_000
    assert len(load_file(tmp_path / "split.yaml")["split_parts"]["train"]) == 150_000


def test_overwrite_on_overlayfs_falls_back_to_delete_and_replace(tmp_path, monkeypatch):
    """A lower-layer directory cannot be renamed (EXDEV): --overwrite still works, as it did before."""
    import errno

    from datareel.cli.prepare import prepare_webdataset
    from datareel.storage import atomic

    root = prepared_shard(tmp_path)
    replace = atomic.os.replace

    def no_rename_of_lower_layer(src, dst):
        if str(src).endswith(".nv-meta"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return replace(src, dst)

    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    monkeypatch.setattr(atomic.os, "replace", no_rename_of_lower_layer)
    prepare_webdataset(root, overwrite=True, progress=False)
    monkeypatch.undo()
    assert len(datareel.open_dataset(root)) == 3
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".nv-meta")) == [".nv-meta"]
