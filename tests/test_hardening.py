"""Hostile inputs (issue 12, first part): every loop over untrusted bytes makes progress or raises a
named DatasetError; argument checks that used to hang or pass bad values through."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import signal
import tarfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datareel
from datareel.energon import WorkerConfig, get_savable_loader, get_train_dataset
from datareel.errors import OptionError, TopologyError
from datareel.sources.tarparse import BLOCK, TarFormatError, iter_members, scan_tar
from state_edit import edited

FUZZ_EXAMPLES = int(os.environ.get("DATAREEL_FUZZ_EXAMPLES", "60"))  # as in test_fuzz.py: raise it to fuzz longer


@contextlib.contextmanager
def must_return(seconds: int = 10, exception: type[BaseException] = AssertionError):
    """Turn a hang into a failure (SIGALRM): a hang guard, not a timing assertion.  ``exception`` is what the
    guard raises (a ``BaseException`` gets through loops that catch the loader's errors)."""

    def hung(signum, frame):
        raise exception(f"did not return within {seconds} s: an endless loop")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def header(name: bytes = b"k.txt", size_field: bytes | None = None, kind: bytes = b"0", size: int = 0) -> bytes:
    """A 512-byte ustar header with a valid checksum (``size_field`` overrides the 12-byte size field)."""
    h = bytearray(BLOCK)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\0"
    h[124:136] = size_field if size_field is not None else f"{size:011o}\0".encode()
    h[136:148] = b"00000000000\0"
    h[156:157] = kind
    h[257:263] = b"ustar\0"
    h[148:156] = b" " * 8
    h[148:156] = f"{sum(h):06o}\0 ".encode()
    return bytes(h)


def pax(payload: bytes) -> bytes:
    padded = payload + b"\0" * (-len(payload) % BLOCK)
    return header(b"PaxHeader", kind=b"x", size=len(payload)) + padded


def members(blob: bytes) -> list:
    with must_return():
        return list(iter_members(blob, "fuzz.tar"))


@pytest.mark.parametrize(
    "payload", [b"0 path=x\n", b"1 path=x\n", b"x path=x\n", b"99 path=x\n", b"-5 path=x\n"], ids=repr
)
def test_a_pax_record_with_a_bad_length_is_a_named_error_not_a_hang(payload):
    blob = pax(payload) + header(size=0) + b"\0" * 1024
    with pytest.raises(TarFormatError, match="PAX record at byte 0 .* claims length"):
        members(blob)


def test_a_negative_member_size_is_refused_not_looped_on():
    minus_512 = b"\xff" + (-512 % (1 << 88)).to_bytes(11, "big")  # base-256 encoding of -512
    blob = header(size_field=minus_512) + b"\0" * 1024
    with pytest.raises(TarFormatError, match="negative member size"):
        members(blob)
    with must_return(), pytest.raises(TarFormatError, match="negative member size"):
        list(scan_tar(io.BytesIO(blob), "fuzz.tar"))


def test_an_extended_header_claiming_gigabytes_is_refused_before_reading():
    blob = header(b"PaxHeader", kind=b"x", size=4 << 30) + b"\0" * 1024
    with must_return(), pytest.raises(TarFormatError, match="claims 4294967296 bytes"):
        list(scan_tar(io.BytesIO(blob), "fuzz.tar"))


def test_a_well_formed_pax_path_still_names_the_member():
    record = b"path=dir/long-name.txt\n"
    length = len(record) + 3
    blob = pax(f"{length} ".encode() + record) + header(b"ignored.txt", size=3) + b"abc" + b"\0" * (509 + 1024)
    assert [(name, size) for name, _, size in members(blob)] == [("dir/long-name.txt", 3)]


@settings(max_examples=5 * FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size_field=st.binary(min_size=12, max_size=12),
    kind=st.sampled_from([b"0", b"x", b"L", b"5", b"2", b"\0"]),
    payload=st.binary(max_size=600),
)
def test_fuzzed_headers_parse_or_raise_a_tar_format_error(size_field, kind, payload):
    blob = header(size_field=size_field, kind=kind) + payload + b"\0" * 1024
    for parse in (lambda: members(blob), lambda: list(scan_tar(io.BytesIO(blob), "fuzz.tar"))):
        try:
            with must_return():
                parse()
        except TarFormatError:
            pass


@settings(max_examples=4 * FUZZ_EXAMPLES, deadline=None)
@given(records=st.lists(st.tuples(st.integers(-3, 40), st.binary(max_size=30)), max_size=5))
def test_fuzzed_pax_records_parse_or_raise_a_tar_format_error(records):
    payload = b"".join(f"{n} ".encode() + body for n, body in records)
    blob = pax(payload) + header(size=0) + b"\0" * 1024
    try:
        members(blob)
    except TarFormatError:
        pass


def test_real_tar_files_still_parse(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"{'d/' * 60}k1.txt", b"hello"), ("k2.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    names = [name for name, _, _ in members(buf.getvalue())]
    assert names == [f"{'d/' * 60}k1.txt", "k2.json"]


def test_an_impossible_layout_with_a_huge_global_batch_is_refused_at_once():
    with must_return(), pytest.raises(TopologyError, match=r"values that work with world_size=1: 1, 2, 4, .*\.\.\."):
        datareel.Loader(range(10), global_batch_size=10**12, micro_batch_size=7)


def test_timeout_and_prefetch_factor_are_checked():
    with pytest.raises(OptionError, match=r"timeout=-1 must be a number of seconds >= 0"):
        datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, timeout=-1)
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    spec = get_train_dataset(datareel.from_sequence(range(4)), worker_config=config, batch_size=2)
    with pytest.raises(OptionError, match=r"get_savable_loader\(prefetch_factor=0\) must be a positive integer"):
        get_savable_loader(spec, prefetch_factor=0)


def test_a_seed_or_cursor_beyond_64_bits_is_refused_naming_the_field():
    with pytest.raises(OptionError, match=r"seed=18446744073709551616 must be an integer >= 0 and at most"):
        datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, seed=1 << 64)
    loader = datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, seed=(1 << 64) - 1)
    assert next(iter(loader)) is not None
    state = loader.state_dict()
    for cursor in (1 << 63, -2):
        with pytest.raises(
            datareel.DatareelError, match=rf"state cursor={cursor} must be an integer in \[0, 2\^63 - 1\]"
        ):
            loader.load_state_dict(edited(state, cursor=cursor))


def _split_yaml(root, parts):
    import yaml

    (root / ".nv-meta" / "split.yaml").write_text(yaml.safe_dump({"split_parts": {"train": parts}}))


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


def test_a_finished_one_pass_loader_yields_nothing_more_on_every_rank_and_its_state_restores():
    for world in (1, 2):
        ranks = [
            datareel.Loader(range(7), global_batch_size=4, micro_batch_size=2, world_size=world, rank=r,
                            repeat=False, shuffle=False)
            for r in range(world)
        ]  # fmt: skip
        first = [[b.tolist() for b in loader] for loader in ranks]
        assert sorted(x for batches in first for b in batches for x in b) == list(range(7))
        for loader in ranks:
            assert [b for b in loader] == [] and len(loader) == 0 and loader.cursor == 7
            again = datareel.Loader(
                range(7), global_batch_size=4, micro_batch_size=2, world_size=world, rank=loader.rank,
                repeat=False, shuffle=False,
            )  # fmt: skip
            again.load_state_dict(loader.state_dict())
            assert list(again) == [] and len(again) == 0


def test_a_mix_epochized_child_rounding_to_zero_samples_is_refused_by_name():
    big, tiny = datareel.from_sequence(range(100), name="big"), datareel.from_sequence(range(3), name="tiny")
    with pytest.raises(OptionError, match=r"children \['tiny'\] round to 0 samples per meta-epoch"):
        datareel.mix_epochized([(big, 1.0), (tiny, 0.1)])
    assert len(datareel.Loader(datareel.mix_epochized([(big, 1.0), (tiny, 0.2)]), global_batch_size=1,
                               micro_batch_size=1, repeat=False)) == 101  # fmt: skip


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
    """Checkpoints are JSON and datasets are parsed, never executed: no pickle.load, eval, exec, unsafe YAML
    or torch.load without weights_only in src/ (the one reviewed exception round-trips its own bytes)."""
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


# -- prepare: one writer, an atomic --overwrite, clear errors from the CLI ----------------------------


def _prepared(root, samples=3):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(root / "a-0.tar", [(f"k{i}", {"txt": b"x" * (i + 1)}) for i in range(samples)])
    prepare_webdataset(root, progress=False)
    return root


def test_a_second_prepare_on_the_same_directory_is_refused_while_the_first_runs(tmp_path):
    from datareel.cli.atomic import locked
    from datareel.cli.prepare import prepare_webdataset

    root = _prepared(tmp_path)
    with locked(root, "a test standing in for another prepare"):  # a separate lock, as another process holds
        with pytest.raises(datareel.DatasetError, match=r"another process is already writing into"):
            prepare_webdataset(root, overwrite=True, progress=False)
    prepare_webdataset(root, overwrite=True, progress=False)  # free again once the holder is gone


def test_overwrite_swaps_the_metadata_atomically_and_keeps_the_length_index(tmp_path):
    from datareel.cli import atomic
    from datareel.cli.prepare import prepare_webdataset

    root = _prepared(tmp_path)
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
    from datareel.cli import atomic
    from datareel.cli.prepare import prepare_webdataset

    root = _prepared(tmp_path)
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

    root = _prepared(tmp_path / "ds")
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


def test_a_directory_named_like_a_shard_is_not_a_shard(tmp_path):
    from datareel.cli.prepare import prepare_webdataset
    from wds_helpers import write_shard

    write_shard(tmp_path / "a-0.tar", [("k", {"txt": b"x"})])
    (tmp_path / "extra.tar").mkdir()
    assert prepare_webdataset(tmp_path, progress=False).shards == 1


# -- a dead worker -------------------------------------------------------------------------------------


class DiesOnce:
    """An encoder whose worker process dies (os._exit, as the OOM killer would) at one sample, once."""

    def __init__(self, marker, at):
        self.marker, self.at = str(marker), at

    def encode_sample(self, sample):
        import os

        if sample == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(9)
        return sample


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("persistent", [True, False])
def test_after_a_worker_dies_a_fresh_iterator_continues_the_same_stream(tmp_path, persistent):
    data = datareel.from_sequence(list(range(40)))
    options = dict(global_batch_size=4, micro_batch_size=2, seed=5)
    reference = [b.tolist() for _, b in zip(range(12), datareel.Loader(data, **options))]
    loader = datareel.Loader(
        data,
        **options,
        num_workers=2,
        persistent_workers=persistent,
        task_encoder=DiesOnce(tmp_path / "died", at=reference[6][0]),
    )
    got = []
    it = iter(loader)
    with pytest.raises(Exception) as info:  # torch's RuntimeError, or an EOFError from the dead worker's queue
        while len(got) < 12:
            got.append(next(it).tolist())
    notes = getattr(info.value, "__notes__", [])
    assert any("call iter(loader) again to continue from cursor" in note for note in notes), info.value
    del info  # its traceback holds the broken DataLoader iterator
    with pytest.raises(datareel.DatareelError, match=r"call iter\(loader\) again"):
        next(it)  # the broken iterator says what to do
    it = iter(loader)  # fresh workers
    while len(got) < 12:
        got.append(next(it).tolist())
    assert got == reference  # nothing lost, nothing repeated
    loader.close()
    del it
    gc.collect()  # worker processes stop here, not inside a later test


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
    _prepared(tmp_path / "ds")
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
        root = _prepared(tmp_path, samples=3)
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


def test_long_metadata_written_out_in_full_is_not_refused_for_its_size(tmp_path):
    """The alias bound counts only values reached again through an alias: a split of 150,000 shards
    written out (JSON or YAML) loads; only expansion is refused."""
    import json

    import yaml

    from datareel.sources.energon_meta import load_file

    counts = {f"part-{i:06d}.tar": 3 for i in range(150_000)}
    (tmp_path / "info.json").write_text(json.dumps({"shard_counts": counts}))
    (tmp_path / "split.yaml").write_text(yaml.safe_dump({"split_parts": {"train": list(counts)}}))
    assert len(load_file(tmp_path / "info.json")["shard_counts"]) == 150_000
    assert len(load_file(tmp_path / "split.yaml")["split_parts"]["train"]) == 150_000


def test_overwrite_on_overlayfs_falls_back_to_delete_and_replace(tmp_path, monkeypatch):
    """A lower-layer directory cannot be renamed (EXDEV): --overwrite still works, as it did before."""
    import errno

    from datareel.cli import atomic
    from datareel.cli.prepare import prepare_webdataset

    root = _prepared(tmp_path)
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
