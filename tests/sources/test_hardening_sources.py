"""Hostile dataset files (issue 12, first part): split.yaml shard lists, brace ranges, metadatasets that
expand without bound, pickles in a dataset, damaged indices and trailing tar members are refused by name
or read as Energon reads them. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import io
import tarfile

import pytest
import yaml

import datareel
from datareel.errors import OptionError
from hangs import must_return
from wds_helpers import prepared_shard


def _split_yaml(root, parts):
    import yaml

    (root / ".nv-meta" / "split.yaml").write_text(yaml.safe_dump({"split_parts": {"train": parts}}))


@pytest.mark.workers
@pytest.mark.parametrize("parts", [["a-0.tar", "a-1.tar", "a-0.tar"], ["a-{0..1}.tar", "a-{1..1}.tar"]], ids=repr)
def test_a_shard_named_twice_in_the_split_is_refused(tmp_path, parts):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    for s in range(2):
        write_shard(tmp_path / f"a-{s}.tar", [(f"k{s}{i}", {"txt": b"x"}) for i in range(3)])
    prepare_webdataset(tmp_path, progress=False)
    assert len(datareel.open_dataset(tmp_path)) == 6
    _split_yaml(tmp_path, parts)
    with pytest.raises(datareel.DatasetError, match=r"names shards \['a-1.tar'\]|names shards \['a-0.tar'\]"):
        datareel.open_dataset(tmp_path)


def test_a_shard_whose_name_holds_braces_opens(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "set{0..1}.tar", [(f"k{i}", {"txt": b"x"}) for i in range(3)])
    prepare_webdataset(tmp_path, progress=False)
    dataset = datareel.open_dataset(tmp_path)
    assert [dataset.key(i) for i in range(len(dataset))] == ["k0", "k1", "k2"]


def test_an_exclude_matching_no_sample_is_refused(tmp_path):
    import yaml

    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "a.tar", [(f"k{i}", {"txt": b"x"}) for i in range(3)])
    prepare_webdataset(tmp_path, progress=False)
    split = tmp_path / ".nv-meta" / "split.yaml"
    config = yaml.safe_load(split.read_text())
    split.write_text(yaml.safe_dump({**config, "exclude": ["a.tar/k1"]}))
    assert len(datareel.open_dataset(tmp_path)) == 2
    split.write_text(yaml.safe_dump({**config, "exclude": ["a.tar/k1", "a.tar/k9"]}))
    with pytest.raises(datareel.DatasetError, match=r"exclude names samples \['k9'\] of shard 'a.tar'"):
        datareel.open_dataset(tmp_path)


class Payload:  # unpickling this would run code from the dataset (here: harmless, it records itself)
    ran = False

    def __reduce__(self):
        return (_mark_ran, ())


def _mark_ran():
    Payload.ran = True
    return "code ran"


def test_pickles_in_a_dataset_are_not_unpickled_unless_trusted(tmp_path, caplog):
    import pickle

    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    tensor = io.BytesIO()
    torch_payload = io.BytesIO()
    import torch

    torch.save(torch.arange(3), tensor)
    torch.save(Payload(), torch_payload)
    parts = {"pyd": pickle.dumps(Payload()), "pth": tensor.getvalue(), "txt": b"hi"}
    write_shard(tmp_path / "a" / "d.tar", [("k0", parts), ("k1", {**parts, "pth": torch_payload.getvalue()})])
    prepare_webdataset(tmp_path / "a", progress=False)
    with caplog.at_level("WARNING", logger="datareel"):
        sample = datareel.open_dataset(tmp_path / "a").read(0)
    assert sample["pyd"] == parts["pyd"] and not Payload.ran  # bytes, with a warning naming the opt-in
    assert "decode='trusted'" in caplog.text and "'pyd'" in caplog.text
    assert sample["pth"].tolist() == [0, 1, 2]  # tensors load with weights_only=True
    with pytest.raises(datareel.DatasetError, match="cannot decode part 'pth'"):
        datareel.open_dataset(tmp_path / "a").read(1)  # a .pth holding an object is refused
    assert not Payload.ran
    trusted = datareel.open_dataset(tmp_path / "a", decode="trusted").read(0)
    assert trusted["pyd"] == "code ran" and Payload.ran
    with pytest.raises(OptionError, match="decode='yes' must be True"):
        datareel.open_dataset(tmp_path / "a", decode="yes")


def test_the_source_holds_no_unsafe_loading():
    """Checkpoints are JSON and datasets are parsed, never executed (unless the user trusts the dataset's code):
    no pickle.load, eval, exec, unsafe YAML or torch.load without weights_only in src/ (the reviewed exceptions:
    one round-trips its own bytes, one runs a sample_loader.py for trust_dataset_code=True)."""
    import re
    from pathlib import Path

    src = Path(datareel.__file__).parent
    pattern = re.compile(r"pickle\.loads?\(|\beval\(|\bexec\(|yaml\.load\(|yaml\.unsafe_load|allow_pickle=True")
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and "pickle.loads(pickle.dumps(" not in line and "Loader=SAFE_LOADER)" not in line
    ]
    # The reviewed exception: Energon's FileStoreCachePool(method="pickle") reads back the pickles it wrote itself
    # into its own 0o700 directory (never bytes of a dataset); each such line says so.
    own = [f for f in found if f.startswith("energon/cache/file_cache_pool.py:") and f.endswith("own bytes")]
    own += [f for f in found if "own bytes: written by to_cache" in f]
    assert len(own) == 2, own
    # The opt-in exception: a dataset's sample_loader.py, run only for trust_dataset_code=True (tested to refuse
    # without it in tests/energon/test_dataset_code.py)
    opted = [f for f in found if f.startswith("sources/dataset_code.py:") and f.endswith("trust_dataset_code=True")]
    assert len(opted) == 1, opted
    found = [f for f in found if f not in own + opted]
    from datareel.sources.energon_meta import SAFE_LOADER

    safe = tuple(c for c in (getattr(yaml, "CSafeLoader", None), yaml.SafeLoader) if c is not None)
    # the one yaml.load's loader: a safe loader (a subclass may refuse more), never one that builds objects
    assert issubclass(SAFE_LOADER, safe) and not issubclass(SAFE_LOADER, yaml.constructor.FullConstructor)
    loads = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "torch.load(" in line and "weights_only=" not in line
    ]
    assert found == [] and loads == []


# -- metadata documents that expand without bound ---------------------------------------------


def _laughs(levels: int) -> str:
    """A metadataset whose anchors double at each line: 2**levels datasets in a few hundred bytes."""
    lines = ["__class__: MetadatasetV2", "l0: &l0 {path: ./ds, weight: 1}"]
    lines += [f"l{i}: &l{i} {{blend: [*l{i - 1}, *l{i - 1}], weight: 1}}" for i in range(1, levels + 1)]
    lines += ["splits:", f"  train: *l{levels}"]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_metadataset_is_refused_at_once(tmp_path):
    (tmp_path / "laughs.yaml").write_text(_laughs(40))  # 2**40 datasets
    with must_return(), pytest.raises(datareel.DatasetError, match=r"expands to more than 100,000 values"):
        datareel.open_dataset(tmp_path / "laughs.yaml")


def test_a_metadataset_including_another_many_times_is_refused_at_once(tmp_path):
    (tmp_path / "inner.yaml").write_text(
        "__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        + "".join("      - {path: ./missing, weight: 1}\n" for _ in range(2))
    )
    refs = "".join("      - {path: ./middle.yaml, weight: 1}\n" for _ in range(400))
    (tmp_path / "middle.yaml").write_text(
        "__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        + "".join("      - {path: ./inner.yaml, weight: 1}\n" for _ in range(400))
    )
    (tmp_path / "outer.yaml").write_text("__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n" + refs)
    # 400 x 400 x 2 leaves: refused by count before any missing dataset is even looked for
    with (
        must_return(60),
        pytest.raises(datareel.DatasetError, match=r"describes 640,801 blends and datasets, more than 100,000"),
    ):
        datareel.open_dataset(tmp_path / "outer.yaml")


@pytest.mark.parametrize(
    "text,match",
    [
        ("__class__: MetadatasetV2\nsplits: &s\n  train: {blend: [*s]}\n", "nested more than 64 levels"),
        ("__class__: MetadatasetV2\nsplits:\n  train: " + "[" * 5000 + "]" * 5000 + "\n", "nest(ed|ing depth)"),
    ],
    ids=["self-referencing anchor", "deep nesting"],
)
def test_a_self_referencing_or_deeply_nested_metadataset_is_a_named_error(tmp_path, text, match):
    (tmp_path / "bad.yaml").write_text(text)
    with must_return(), pytest.raises(datareel.DatasetError, match=match):
        datareel.open_dataset(tmp_path / "bad.yaml")


def test_a_brace_range_of_a_trillion_shards_is_refused(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "a-0.tar", [("k", {"txt": b"x"})])
    prepare_webdataset(tmp_path, progress=False)
    _split_yaml(tmp_path, ["a-{0..999999999999}.tar"])
    with (
        must_return(30),
        pytest.raises(datareel.DatasetError, match=r"expands to more than 1 names, more than the dataset has shards"),
    ):
        datareel.open_dataset(tmp_path)


@pytest.mark.parametrize(
    "pattern", ["a-{0..3}.tar", "{a,b}-{0..1}.tar", "x{1{2,3},4}y", "{0..10..3}", "{07..10}", "{4..1}", "a{b}c", "{}"]
)
def test_the_brace_count_equals_what_braceexpand_gives(pattern):
    from braceexpand import braceexpand

    from datareel.sources.energon_meta import _brace_count

    assert _brace_count(pattern) == len(list(braceexpand(pattern)))


def test_unbalanced_braces_in_the_split_are_a_named_error(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "a-0.tar", [("k", {"txt": b"x"})])
    prepare_webdataset(tmp_path, progress=False)
    _split_yaml(tmp_path, ["a-{0..1.tar"])
    with pytest.raises(datareel.DatasetError, match=r"'a-\{0..1.tar'.*balance its braces"):
        datareel.open_dataset(tmp_path)


def _shard_with_trailing_members(path):
    """Two samples, then members that belong to no sample: a README without a dot, a directory, a symlink."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("a.txt", b"first"), ("a.json", b"{}"), ("b.txt", b"second"), ("README", b"notes")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        directory = tarfile.TarInfo("subdir")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        link = tarfile.TarInfo("link.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "a.txt"
        tar.addfile(link)


@pytest.mark.slow  # runs Energon's CLI
def test_a_shard_ending_with_non_sample_members_prepares_and_reads_as_energons(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import energon_prepare

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        root.mkdir()
        _shard_with_trailing_members(root / "s.tar")
    prepare_webdataset(ours, progress=False)
    energon_prepare(theirs)
    assert (ours / "s.tar.idx").read_bytes() == (theirs / "s.tar.idx").read_bytes()
    (theirs / ".nv-meta" / "dataset.yaml").write_bytes((ours / ".nv-meta" / "dataset.yaml").read_bytes())
    for root in (ours, theirs):  # both indices open and read in datareel
        dataset = datareel.open_dataset(root, decode=False)
        assert [dataset.read(i)["__key__"] for i in range(len(dataset))] == ["a", "b"]
        assert dataset.read(1)["txt"] == b"second" and set(dataset.read(1)) >= {"txt"}


def test_a_directory_named_like_a_shard_is_not_a_shard(tmp_path):
    """An empty directory named *.tar is no shard, and prepare names it rather than leaving it out unsaid."""
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "a-0.tar", [("k", {"txt": b"x"})])
    (tmp_path / "extra.tar").mkdir()
    with pytest.raises(datareel.DatasetError, match=r"extra\.tar is a directory, not a tar shard"):
        prepare_webdataset(tmp_path, progress=False)


@pytest.mark.parametrize(
    "entry,named",
    [
        ("{path: ./ds, weight: 1, split_part: [train]}", r"split_part=\['train'\] must be a non-empty string"),
        ("{path: ./ds, weight: 1, subset: {range: ['nan%', end]}}", r"'nan%' is not a percentage in \[0%, 100%\]"),
        ("{path: ./ds, weight: 1, subset: {range: ['0%', '150%']}}", r"'150%' is not a percentage"),
        ("{path: ./ds, weight: " + "9" * 400 + "}", r"weight=9+ must be a positive number"),
        ("{path: 17, weight: 1}", r"path=17 must be a non-empty string"),
        ("{1: 2, path: ./ds}", r"keys that are not strings: \[1\]"),
    ],
    ids=["split_part list", "nan%", "150%", "huge weight", "path int", "int key"],
)
def test_malformed_metadataset_entries_are_named_errors(tmp_path, entry, named):
    prepared_shard(tmp_path / "ds")
    text = (
        f"__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n      - {entry}\n      - {{path: ./ds, weight: 1}}\n"
    )
    (tmp_path / "m.yaml").write_text(text)
    with must_return(), pytest.raises(datareel.DatasetError, match=named):
        datareel.open_dataset(tmp_path / "m.yaml")


@pytest.mark.parametrize("kind", ["tar", "jsonl"])
@pytest.mark.parametrize(
    "offsets", [[0, 1 << 40], [1 << 40, 3], [2**64 - 1, 2**64 - 1]], ids=["1 TiB", "reversed", "max"]
)
def test_a_damaged_index_is_refused_before_any_huge_or_negative_read(tmp_path, kind, offsets):
    import struct

    from datareel.cli.prepare import prepare_jsonl

    if kind == "tar":
        root = prepared_shard(tmp_path, samples=3)
        index, open_path = root / "a-0.tar.idx", root
    else:
        open_path = tmp_path / "d.jsonl"
        open_path.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
        prepare_jsonl(open_path)
        index = tmp_path / "d.jsonl.idx"
    words = list(struct.unpack(f"<{index.stat().st_size // 8}Q", index.read_bytes()))
    words[1:3] = offsets  # sample 1's range (and sample 0's end, sample 2's start)
    index.write_bytes(struct.pack(f"<{len(words)}Q", *words))
    dataset = datareel.open_dataset(open_path, decode=False)
    with must_return(), pytest.raises(datareel.DatasetError, match=r"index file .*: sample 1 spans bytes"):
        dataset.read(1)
