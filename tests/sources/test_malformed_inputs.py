"""Malformed dataset inputs (issue 25): every malformed value of every metadata file ``open_dataset``
reads is a named :class:`~datareel.DatareelError`, and a typo in a metadataset, ``dataset.yaml`` or
``split.yaml`` is refused with a did-you-mean instead of being read as if absent.

Files covered: ``.nv-meta/.info.json`` (and ``.info.yaml``), ``.nv-meta/split.yaml``,
``.nv-meta/dataset.yaml`` (crude and typed), the ``.tar.idx`` and ``.jsonl.idx`` index files, JSONL
lines, and metadataset YAML.  The property tests mutate each field (and each key) of each file of a
valid prepared dataset into hostile values and read every sample: the only exception allowed out is
a ``DatareelError``.  The explicit cases check that the message names the file and the value.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, DatasetError
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from hangs import bounded
from profiles import examples
from wds_helpers import write_shard
from where import HELPERS

FUZZ = settings(
    max_examples=examples(0.6),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
METADATASET = {
    **HEADER,
    "splits": {
        "train": {
            "blend": [
                {"weight": 2, "path": "crude", "subflavors": {"x": 1}, "subset": {"range": ["0%", "100%"]}},
                {"weight": 1, "path": "typed", "split_part": "train", "shuffle_over_epochs_multiplier": 1},
                {"weight": 1, "blend_epochized": [{"repetitions": 2, "path": "d.jsonl"}]},
            ]
        },
        "val": {"path": "crude"},
    },
}


def make_world(root: Path) -> Path:
    """A crude and a typed prepared dataset (2 shards each, train and val), a JSONL file and a metadataset."""
    for name, sample_type, field_map in [("crude", "CrudeWebdataset", None), ("typed", "TextSample", {"text": "txt"})]:
        for s in range(2):
            samples = [(f"{name}{s}{i}", {"txt": f"t{i}".encode(), "json": b'{"a": [1, 2]}'}) for i in range(3)]
            write_shard(root / name / "parts" / f"p-{s}.tar", samples)
        prepare_webdataset(
            root / name, split_ratio="1,1,0", sample_type=sample_type, field_map=field_map, progress=False
        )
        config = root / name / ".nv-meta" / "dataset.yaml"
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "subflavors": {"src": name}}))
    (root / "d.jsonl").write_text('{"a": 1}\n{"a": [2]}\n\n{"b": "x"}\n')
    prepare_jsonl(root / "d.jsonl")
    (root / "m.yaml").write_text(yaml.safe_dump(METADATASET, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return make_world(tmp_path_factory.mktemp("world"))


def read_everything(path: Path, split: str = "train") -> None:
    dataset = datareel.open_dataset(path, split=split)
    for source in getattr(dataset, "leaves", lambda: [dataset])():
        for i in range(len(source)):
            source.read(i)


def works_or_refuses(path: Path, split: str = "train") -> None:
    with bounded():
        try:
            read_everything(path, split)
        except DatareelError:
            pass  # anything else escapes and fails the test


# -- every field of every metadata file -------------------------------------------------------------

HUGE = 10**5000  # past Python's int conversion limit (4,300 digits) when read back
HOSTILE = [
    None,
    True,
    -1,
    0,
    2**63,
    2**64 + 5,
    10**30,
    HUGE,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "{",
    "a" * 300,
    "../..",
    [],
    [1, 2],
    [[1]],
    {},
    {"a": 1},
    {"__class__": "X"},
]
FILES = {
    # file relative to the world -> (format, what to open, split)
    "crude/.nv-meta/.info.json": ("json", "crude", "train"),
    "crude/.nv-meta/split.yaml": ("yaml", "crude", "train"),
    "crude/.nv-meta/dataset.yaml": ("yaml", "crude", "train"),
    "typed/.nv-meta/dataset.yaml": ("yaml", "typed", "val"),
    "m.yaml": ("yaml", "m.yaml", "train"),
}


def paths(document, prefix=()):
    """Every place in a parsed document: the document itself, each mapping value and each list item."""
    yield prefix
    items = (
        document.items() if isinstance(document, dict) else enumerate(document) if isinstance(document, list) else ()
    )
    for key, value in items:
        yield from paths(value, prefix + (key,))


def replaced(document, path, value):
    if not path:
        return value
    out = copy.deepcopy(document)
    here = out
    for step in path[:-1]:
        here = here[step]
    here[path[-1]] = value
    return out


def renamed(document, path, new_key):
    """The document with the key at ``path`` (a mapping key) renamed to ``new_key``."""
    out = copy.deepcopy(document)
    here = out
    for step in path[:-1]:
        here = here[step]
    if isinstance(here, dict):
        here[new_key] = here.pop(path[-1])
    return out


def dumped(document, kind: str) -> str | None:
    """The document as JSON or YAML text (``None`` if the format cannot hold it); huge ints written out."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(document) if kind == "json" else yaml.safe_dump(document)
    except (ValueError, TypeError, yaml.YAMLError):
        return None
    finally:
        sys.set_int_max_str_digits(limit)


def parsed(world: Path, name: str):
    text = (world / name).read_text()
    return json.loads(text) if FILES[name][0] == "json" else yaml.safe_load(text)


def try_text(world: Path, name: str, text: str | bytes, info_yaml: bool = False) -> None:
    """Open (and read through) the dataset ``name`` belongs to with ``name`` holding ``text``: a metadataset
    as a new file beside the original (its datasets are only read), a dataset's own file in a fresh copy
    of that dataset (a new path each time: no open shard or index of an earlier example is reused)."""
    kind, target, split = FILES[name]
    blob = text.encode() if isinstance(text, str) else text
    if name == "m.yaml":
        fd, mds = tempfile.mkstemp(suffix=".yaml", dir=world)
        os.write(fd, blob)
        os.close(fd)
        try:
            works_or_refuses(Path(mds), split)
        finally:
            os.unlink(mds)
        return
    copy = Path(tempfile.mkdtemp(prefix="copy-", dir=world.parent))
    try:
        shutil.copytree(world / target, copy / target, ignore=shutil.ignore_patterns("index.sqlite"))
        path = copy / name
        if info_yaml:  # the legacy .info.yaml instead of .info.json
            path.unlink()
            path = path.with_name(".info.yaml")
        path.write_bytes(blob)
        works_or_refuses(copy / target, split)
    finally:
        shutil.rmtree(copy)


BYTES = [
    b"",
    b"\xff\xfe\x00garbage",
    b"{",
    b"[1, 2]",
    b"null",
    b"- a\n- b",
    b"\t\x00",
    b"9" * 5000,
    b"a: " + b"9" * 5000,
]


@pytest.mark.parametrize("name", list(FILES))
def test_every_field_of_every_metadata_file_works_or_is_a_named_error(world, name):
    """Exhaustive: each value of the file replaced by each hostile value, each key renamed, and whole files
    of hostile bytes."""
    document = parsed(world, name)
    for path in list(paths(document)):
        for value in HOSTILE:
            text = dumped(replaced(document, path, value), FILES[name][0])
            if text is not None:
                try_text(world, name, text, info_yaml=False)
        if path and isinstance(path[-1], str):
            for key in ("", "x" * 300, "splitz", "wieght", "__class__"):
                text = dumped(renamed(document, path, key), FILES[name][0])
                if text is not None:
                    try_text(world, name, text)
    for blob in BYTES:
        try_text(world, name, blob)


def test_every_field_of_a_legacy_info_yaml_works_or_is_a_named_error(world):
    name = "crude/.nv-meta/.info.json"
    document = parsed(world, name)
    for path in list(paths(document)):
        for value in HOSTILE:
            text = dumped(replaced(document, path, value), "yaml")
            if text is not None:
                try_text(world, name, text, info_yaml=True)


SCALAR = st.one_of(
    st.sampled_from([v for v in HOSTILE if v is not HUGE]),  # hypothesis prints examples: no unprintable int
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["train", "val", "parts/p-0.tar", "parts/p-{0..1}.tar", "parts/p-1.tar/crude10", "50%", "end"]),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10,
)


@FUZZ
@given(data=st.data(), name=st.sampled_from(list(FILES)))
def test_fuzzed_metadata_files_work_or_are_named_errors(world, data, name):
    document = parsed(world, name)
    places = list(paths(document))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(places), label="path")
        try:
            document = replaced(document, path, data.draw(VALUE, label="value"))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the place
    text = dumped(document, FILES[name][0])
    if text is not None:
        try_text(world, name, text)


def damage_index(blob: bytes, draw) -> bytes:
    words = list(struct.unpack(f"<{len(blob) // 8}Q", blob))
    kind = draw(st.sampled_from(["truncate", "extend", "word", "bytes", "reverse"]))
    if kind == "truncate":
        return blob[: draw(st.integers(0, len(blob) - 1))]
    if kind == "extend":
        return blob + draw(st.binary(min_size=1, max_size=24))
    if kind == "word":
        words[draw(st.integers(0, len(words) - 1))] = draw(st.integers(0, 2**64 - 1))
        return struct.pack(f"<{len(words)}Q", *words)
    if kind == "reverse":
        return struct.pack(f"<{len(words)}Q", *reversed(words))
    return draw(st.binary(max_size=64))


@FUZZ
@given(data=st.data(), index=st.sampled_from(["crude/parts/p-0.tar.idx", "typed/parts/p-1.tar.idx", "d.jsonl.idx"]))
def test_fuzzed_index_files_work_or_are_named_errors(world, data, index):
    copy = Path(tempfile.mkdtemp(prefix="copy-", dir=world.parent))
    try:
        if "/" in index:
            target = copy / index.split("/")[0]
            shutil.copytree(world / target.name, target, ignore=shutil.ignore_patterns("index.sqlite"))
        else:
            target = copy / "d.jsonl"
            shutil.copy(world / "d.jsonl", target)
            shutil.copy(world / index, copy / index)
        path = copy / index
        path.write_bytes(damage_index(path.read_bytes(), data.draw))
        works_or_refuses(target, "val" if index.startswith("typed") else "train")
    finally:
        shutil.rmtree(copy)


# -- explicit cases: the message names the file and the value ---------------------------------------


def edit_yaml(path: Path, **changes) -> None:
    document = yaml.safe_load(path.read_text())
    document.update(changes)
    path.write_text(yaml.safe_dump(document))


@pytest.mark.parametrize(
    "changes,named",
    [
        ({"sample_type": [1, 2]}, r"sample_type=\[1, 2\] must name a sample class"),
        ({"sample_type": {"__class__": {"a": 1}}}, r"sample_type=.* must name a sample class"),
        ({"subflavors": [1, 2]}, r"subflavors=\[1, 2\] must be a mapping"),
        ({"field_map": {"text": ["txt"]}}, r"field_map values must be part names"),
        ({"feild_map": {"text": "txt"}}, r"unknown key 'feild_map' \(did you mean 'field_map'\?\)"),
        ({"subflavours": {"a": 1}}, r"unknown key 'subflavours' \(did you mean 'subflavors'\?\)"),
        ({"decoder": {"image_decode": "pil"}}, r"'decoder': a decoder configured in dataset.yaml is not read"),
        ({"__module__": "evil"}, r"__module__='evil' is not megatron.energon"),
        ({"__class__": "CrudeWebdataset"}, r"CrudeWebdataset keeps every part .* no sample_type or field_map"),
    ],
)
def test_a_malformed_dataset_yaml_names_the_file_and_the_value(tmp_path, world, changes, named):
    root = tmp_path / "typed"
    shutil.copytree(world / "typed", root)
    edit_yaml(root / ".nv-meta" / "dataset.yaml", **changes)
    with pytest.raises(DatasetError, match=named) as caught:
        datareel.open_dataset(root)
    assert str(root / ".nv-meta" / "dataset.yaml") in str(caught.value)


@pytest.mark.parametrize("info", [".info.json", ".info.yaml"])
@pytest.mark.parametrize(
    "count,named",
    [
        ("9" * 30, r"shard_counts\['parts/p-0.tar'\]=9{30} is not a sample count"),
        ("9" * 5000, r"an integer of more than 4,300 digits"),
        ("-3", r"shard_counts\['parts/p-0.tar'\]=-3 is not a sample count"),
        ('"3"', r"shard_counts\['parts/p-0.tar'\]='3' is not a sample count"),
        ("[3]", r"shard_counts\['parts/p-0.tar'\]=\[3\] is not a sample count"),
    ],
    ids=["30 digits", "5000 digits", "negative", "string", "list"],
)
def test_a_malformed_shard_count_names_the_info_file(tmp_path, world, info, count, named):
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    meta = root / ".nv-meta"
    text = f'{{"energon_version": "x", "shard_counts": {{"parts/p-0.tar": {count}, "parts/p-1.tar": 3}}}}'
    (meta / ".info.json").unlink()
    (meta / info).write_text(text)  # JSON is YAML too
    with pytest.raises(DatasetError, match=named) as caught:
        read_everything(root)
    assert str(meta / info) in str(caught.value)


@pytest.mark.parametrize(
    "name,content,named",
    [
        (".nv-meta/split.yaml", b"split_parts: {train: [parts/p-0.tar]}\nexlcude: []\n", r"unknown key 'exlcude'"),
        (".nv-meta/split.yaml", b"split_parts: " + b"9" * 5000, r"an integer of more than"),
        (".nv-meta/split.yaml", b"\xff\xfe", r"not UTF-8 text"),
        (".nv-meta/split.yaml", b"", r"no 'split_parts' mapping"),
        (".nv-meta/split.yaml", b"split_parts: [1, 2]", r"no 'split_parts' mapping .* got \[1, 2\]"),
        (".nv-meta/dataset.yaml", b"", r"must hold a mapping"),
        (".nv-meta/dataset.yaml", b"a: [", r"cannot read"),
        (".nv-meta/.info.json", b"{", r"cannot read"),
        (".nv-meta/.info.json", b"", r"cannot read"),
        (".nv-meta/.info.json", b"[" * 100_000, r"nested too deeply"),
        ("parts/p-0.tar.idx", b"", r"has 0 bytes, not a whole number"),
        ("parts/p-0.tar.idx", b"\0" * 12, r"has 12 bytes"),
        ("parts/p-0.tar.idx", b"\0" * 8 * 9, r"holds 8 samples but .*says 3"),
    ],
)
def test_a_malformed_metadata_file_names_itself(tmp_path, world, name, content, named):
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    (root / name).write_bytes(content)
    with pytest.raises(DatasetError, match=named) as caught:
        read_everything(root)
    assert str(root / name) in str(caught.value)


@pytest.mark.parametrize(
    "content,named",
    [(b"", r"has 0 bytes"), (b"\0" * 7, r"has 7 bytes"), (b"\0" * 8, r"ends at byte 0 but")],
)
def test_a_malformed_jsonl_index_names_itself(tmp_path, world, content, named):
    shutil.copy(world / "d.jsonl", tmp_path / "d.jsonl")
    (tmp_path / "d.jsonl.idx").write_bytes(content)
    with pytest.raises(DatasetError, match=named) as caught:
        read_everything(tmp_path / "d.jsonl")
    assert str(tmp_path / "d.jsonl.idx") in str(caught.value)


@pytest.mark.parametrize(
    "content,named",
    [
        (b"", r"a metadataset is a mapping"),
        (b"\xff", r"not UTF-8 text"),
        (b"splits: {train: {path: " + b"9" * 5000 + b"}}", r"an integer of more than"),
        (b"__class__: MetadatasetV2\nsplits: [1]", r"with a 'splits' mapping"),
        (b"__class__: MetadatasetV2\nsplits: {train: [", r"cannot read metadataset"),
    ],
)
def test_a_malformed_metadataset_file_names_itself(tmp_path, content, named):
    (tmp_path / "m.yaml").write_bytes(content)
    with pytest.raises(DatasetError, match=named) as caught:
        datareel.open_dataset(tmp_path / "m.yaml")
    assert str(tmp_path / "m.yaml") in str(caught.value)


# -- JSONL lines that Python's parser cannot take ---------------------------------------------------

LINES = {
    "5000-digit integer": ('{"a": ' + "9" * 5000 + "}", r"holds an integer of more than 4,300 digits"),
    "100,000 deep": ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", r"JSON nested too deeply to parse"),
}


@pytest.mark.parametrize("line", list(LINES))
def test_prepare_refuses_an_unparsable_jsonl_line_naming_file_and_line(tmp_path, line, capsys):
    from datareel.cli import main

    path = tmp_path / "d.jsonl"
    text, named = LINES[line]
    path.write_text('{"a": 1}\n\n' + text + '\n{"a": 2}\n')
    with pytest.raises(DatasetError, match=rf"{path} line 3: {named}"):
        prepare_jsonl(path)
    assert main(["prepare", str(path), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert f"{path} line 3" in err and "Traceback" not in err


@pytest.mark.parametrize("line", list(LINES))
def test_the_reader_refuses_an_unparsable_jsonl_line_naming_file_and_sample(tmp_path, line):
    import numpy as np

    path = tmp_path / "d.jsonl"
    text, named = LINES[line]
    path.write_text('{"a": 1}\n' + text + "\n")
    first = len('{"a": 1}\n')
    np.array([0, first, path.stat().st_size], dtype="<u8").tofile(f"{path}.idx")  # indexed before the edit
    source = datareel.open_dataset(path)
    assert source.read(0)["json"] == {"a": 1}
    with pytest.raises(DatasetError, match=rf"{path} sample 1 .*: {named}"):
        source.read(1)


# -- paths that are not datasets --------------------------------------------------------------------


def test_a_tar_file_given_instead_of_its_folder_says_so(world):
    shard = world / "crude" / "parts" / "p-0.tar"
    with pytest.raises(DatasetError, match=rf"{shard} is a tar shard, not a dataset.* Open {world / 'crude'}$"):
        datareel.open_dataset(shard)
    with pytest.raises(DatasetError, match=rf"is a shard index, not a dataset.* Open {world / 'crude'}$"):
        datareel.open_dataset(f"{shard}.idx")


def test_a_tar_of_an_unprepared_folder_suggests_prepare(tmp_path):
    write_shard(tmp_path / "raw" / "a.tar", [("k", {"txt": b"x"})])
    with pytest.raises(DatasetError, match=rf"tar shard.* Open {tmp_path / 'raw'} after `datareel prepare"):
        datareel.open_dataset(tmp_path / "raw" / "a.tar")


def test_a_directory_without_nv_meta_says_what_is_missing(tmp_path):
    write_shard(tmp_path / "raw" / "a.tar", [("k", {"txt": b"x"})])
    with pytest.raises(
        DatasetError, match=r"is a directory but not a prepared dataset: it has no \.nv-meta/.*datareel prepare"
    ):
        datareel.open_dataset(tmp_path / "raw")
    (tmp_path / "raw" / ".nv-meta").mkdir()
    with pytest.raises(
        DatasetError, match=r"has no \.nv-meta/\.info\.json \(or \.info\.yaml\).*preparation did not finish"
    ):
        datareel.open_dataset(tmp_path / "raw")


def test_a_missing_path_says_so_and_names_close_ones(world):
    with pytest.raises(DatasetError, match=rf"{world / 'crud'} does not exist; did you mean {world / 'crude'}\?"):
        datareel.open_dataset(world / "crud")
    with pytest.raises(DatasetError, match=r"JSONL file .*e\.jsonl does not exist; did you mean .*d\.jsonl "):
        datareel.open_dataset(world / "e.jsonl")
    with pytest.raises(DatasetError, match=r"index\.uuid is a file, not a dataset: datareel opens a prepared"):
        datareel.open_dataset(world / "crude" / ".nv-meta" / "index.uuid")
    with pytest.raises(DatasetError, match=r"d\.jsonl\.idx is the index of a JSONL dataset: open .*d\.jsonl$"):
        datareel.open_dataset(world / "d.jsonl.idx")
    (world / "dir.jsonl").mkdir(exist_ok=True)
    with pytest.raises(DatasetError, match=r"dir\.jsonl is not a file: a JSONL dataset is one \.jsonl file"):
        datareel.open_dataset(world / "dir.jsonl")
    with pytest.raises(DatasetError, match=r"cannot open .*: File name too long"):
        datareel.open_dataset(world / ("x" * 300))


@pytest.mark.parametrize(
    "path,named",
    [
        ("crud", r"crud does not exist; did you mean .*crude\?"),
        ("crude/parts/p-0.tar", r"is a tar shard, not a dataset"),
        ("e.jsonl", r"JSONL file .*e\.jsonl does not exist; did you mean .*d\.jsonl"),
        ("inner.yaml", r"metadataset .*inner\.yaml does not exist"),
        ("x" * 300, r"File name too long"),
    ],
)
def test_a_wrong_path_in_a_metadataset_names_the_yaml_and_the_entry(world, tmp_path, path, named):
    mds = world / f"wrong-{abs(hash(path))}.yaml"
    mds.write_text(
        yaml.safe_dump({**HEADER, "splits": {"train": {"blend": [{"path": "crude", "weight": 1}, {"path": path}]}}})
    )
    with pytest.raises(DatasetError, match=named) as caught:
        datareel.open_dataset(mds)
    assert str(caught.value).startswith(f"{mds}: splits.train.blend[1].path={path!r}: ")


# -- item 4: a typo anywhere in a metadataset is refused, with a did-you-mean ------------------------


def metadataset(tmp_path: Path, world: Path, document: dict) -> Path:
    for name in ("crude", "typed", "d.jsonl", "d.jsonl.idx"):
        if not (tmp_path / name).exists():
            (shutil.copytree if (world / name).is_dir() else shutil.copy)(world / name, tmp_path / name)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def blend(*items, **extra) -> dict:
    return {**HEADER, "splits": {"train": {"blend": list(items), **extra}}}


TYPOS = {
    "top-level splitz": (
        {**HEADER, "splits": {"train": {"path": "crude"}}, "splitz": {}},
        r"the top level has an unknown key 'splitz' \(did you mean 'splits'\?\); a metadataset takes "
        r"__class__, __module__, splits",
    ),
    "blend item wieght": (
        blend({"path": "crude", "wieght": 2}, {"path": "typed"}),
        r"splits\.train\.blend\[0\] has an unknown key 'wieght' \(did you mean 'weight'\?\); a dataset entry takes "
        r".*dataset_config, path, .*weight",
    ),
    "epochized repititions": (
        {**HEADER, "splits": {"train": {"blend_epochized": [{"path": "crude", "repititions": 2}]}}},
        r"blend_epochized\[0\] has an unknown key 'repititions' \(did you mean 'repetitions'\?\)",
    ),
    "dataset subflavours": (
        blend({"path": "crude", "subflavours": {"a": 1}}),
        r"unknown key 'subflavours' \(did you mean 'subflavors'\?\)",
    ),
    "blend node shuffle typo": (
        blend({"path": "crude"}, shuffle_over_epoch_multiplier=1),
        r"splits\.train has an unknown key 'shuffle_over_epoch_multiplier' \(did you mean "
        r"'shuffle_over_epochs_multiplier'\?\); a blend takes",
    ),
    "subset rnage": (
        blend({"path": "crude", "subset": {"rnage": [0, 2]}}),
        r"blend\[0\]\.subset has an unknown key 'rnage' \(did you mean 'range'\?\); subset takes range",
    ),
    "split_part on a blend": (
        blend({"path": "crude"}, split_part="val"),
        r"splits\.train is a blend: \['split_part'\] belong to a dataset entry",
    ),
    "weight on a split's own entry": (
        {**HEADER, "splits": {"train": {"path": "crude", "weight": 3}}},
        r"splits\.train has 'weight', which belongs in a blend list \(a split's own entry takes neither\)",
    ),
    "path typo": (
        blend({"pth": "crude"}),
        r"blend\[0\] has an unknown key 'pth' \(did you mean 'path'\?\)",
    ),
    "legacy datasetz": (
        {
            "__module__": "megatron.energon",
            "__class__": "Metadataset",
            "splits": {"train": {"datasets": [{"path": "crude"}], "datasetz": []}},
        },
        r"splits\.train has an unknown key 'datasetz' \(did you mean 'datasets'\?\)",
    ),
    "legacy entry wieght": (
        {
            "__module__": "megatron.energon",
            "__class__": "Metadataset",
            "splits": {"train": {"datasets": [{"path": "crude", "wieght": 1}]}},
        },
        r"unknown key 'wieght' \(did you mean 'weight'\?\)",
    ),
}


@pytest.mark.parametrize("case", list(TYPOS))
def test_a_typo_anywhere_in_a_metadataset_is_refused_with_a_did_you_mean(tmp_path, world, case):
    document, named = TYPOS[case]
    path = metadataset(tmp_path, world, document)
    with pytest.raises(DatasetError, match=named) as caught:
        datareel.open_dataset(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_energon_also_refuses_each_typo_and_reads_the_fixed_file(tmp_path, world):
    """The reference: megatron.energon 7.4.1 refuses the same files (so refusing them loses nothing), and
    reads the files the typos came from."""
    from megatron.energon.metadataset import load_dataset

    for document, _ in TYPOS.values():
        path = metadataset(tmp_path, world, document)
        with pytest.raises(Exception):
            load_dataset(path)
    fixed = metadataset(tmp_path, world, blend({"path": "crude", "weight": 2}, {"path": "typed"}))
    load_dataset(fixed)
    datareel.open_dataset(fixed)


@pytest.mark.parametrize(
    "node,named",
    [
        (
            {"join": [{"path": "crude"}, {"path": "typed"}], "joiner": {"__module__": "x", "__class__": "Y"}},
            r"joiner names x\.Y, but module 'x' is not imported; datareel never imports what a dataset names",
        ),
        ({"path": "m.yaml", "aux": {"x": "filesystem://y"}}, r"aux belongs on a dataset entry, not on a metadataset"),
        ({"path": "crude", "subflavor": "a"}, r"'subflavor': the legacy single subflavor .*__subflavor__"),
        (
            {"path": "crude", "__module__": "megatron.energon", "__class__": "DatasetReference"},
            r"'__module__': a class named inside a split",
        ),
        ({"path": "crude", "nonmatch": "skip"}, r"'nonmatch': nonmatch belongs on a dataset inside a join"),
    ],
)
def test_energon_keys_datareel_cannot_honour_are_refused_by_name(tmp_path, world, node, named):
    path = metadataset(tmp_path, world, {**HEADER, "splits": {"train": node}})
    with pytest.raises(DatasetError, match=named):
        datareel.open_dataset(path)


def test_a_metadataset_naming_another_module_is_refused(tmp_path, world):
    path = metadataset(
        tmp_path, world, {"__module__": "evil", "__class__": "MetadatasetV2", "splits": {"train": {"path": "crude"}}}
    )
    with pytest.raises(DatasetError, match=r"__module__='evil' is not megatron.energon"):
        datareel.open_dataset(path)


def test_the_valid_world_opens_everywhere(world):
    read_everything(world / "m.yaml")
    read_everything(world / "m.yaml", split="val")
    read_everything(world / "typed", split="val")
    read_everything(world / "d.jsonl")


# -- excludes by key: O(excluded) memory, whatever the counts claim ---------------------------------


def test_a_huge_shard_count_beside_an_exclude_by_key_is_a_named_error(tmp_path, world):
    """The kept-index array was np.arange(total samples): a count of 2^62 in .info.json asked for 32 EiB
    (a bare ValueError); now the excluded indices alone are held and the count fails its shard's check."""
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    meta = root / ".nv-meta"
    info = json.loads((meta / ".info.json").read_text())
    info["shard_counts"]["parts/p-1.tar"] = 2**62
    (meta / ".info.json").write_text(json.dumps(info))
    split = {"split_parts": {"train": ["parts/p-0.tar", "parts/p-1.tar"]}, "exclude": ["parts/p-0.tar/crude00"]}
    (meta / "split.yaml").write_text(yaml.safe_dump(split))
    source = datareel.open_dataset(root)
    assert len(source) == 3 + 2**62 - 1
    assert source.read(0)["__key__"] == "crude01"
    with pytest.raises(DatasetError, match=r"holds 3 samples but .*says 4611686018427387904"):
        source.read(2)


@given(excluded=st.sets(st.integers(0, 5), max_size=5))
@settings(max_examples=examples(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_excluding_samples_by_key_keeps_the_others_in_order(world, excluded):
    root = Path(tempfile.mkdtemp(prefix="copy-", dir=world.parent))
    try:
        shutil.copytree(world / "crude", root / "crude", ignore=shutil.ignore_patterns("index.sqlite"))
        keys = [f"crude{s}{i}" for s in range(2) for i in range(3)]
        exclude = [f"parts/p-{k // 3}.tar/{keys[k]}" for k in sorted(excluded)]
        split = {"split_parts": {"train": ["parts/p-0.tar", "parts/p-1.tar"]}, "exclude": exclude}
        (root / "crude" / ".nv-meta" / "split.yaml").write_text(yaml.safe_dump(split))
        if len(excluded) == len(keys):
            return
        source = datareel.open_dataset(root / "crude")
        kept = [k for i, k in enumerate(keys) if i not in excluded]
        assert [source.read(i)["__key__"] for i in range(len(source))] == kept
        assert [s["__key__"] for s in source.read_many(np.arange(len(source)))] == kept
        with pytest.raises(IndexError):
            source.locate_many(np.array([len(source)]))
    finally:
        shutil.rmtree(root)


# -- the length index (.lengths.npy and its .json record), read when packing by length="index" ------


@pytest.fixture(scope="module")
def indexed_jsonl(tmp_path_factory) -> Path:
    from datareel.cli.lengths import compute_length_index

    path = tmp_path_factory.mktemp("lengths") / "d.jsonl"
    path.write_text("".join(json.dumps({"text": "z" * n}) + "\n" for n in (4, 8, 15, 3)))
    prepare_jsonl(path)
    tests = str(HELPERS)  # length_fns.py
    sys.path.insert(0, tests)
    try:
        compute_length_index(path, "length_fns:json_length", workers=1, progress=False)
    finally:
        sys.path.remove(tests)
    return path


RECORDS = [b"", b"\xff", b"{", b"[1]", b'{"check": [1]}', b'{"check": {"d.jsonl": 5}}', b'{"x": ' + b"9" * 5000 + b"}"]
ARRAYS = [b"", b"\x93NUMPY garbage", None, "float", "short", "2d", "objects"]


@pytest.mark.parametrize("damage", range(len(RECORDS) + len(ARRAYS)))
def test_a_damaged_length_index_is_a_named_error(tmp_path, indexed_jsonl, damage):
    from datareel.sources.lengths import forget_index, lengths_of

    for name in ("d.jsonl", "d.jsonl.idx", "d.jsonl.lengths.npy", "d.jsonl.lengths.npy.json"):
        shutil.copy(indexed_jsonl.parent / name, tmp_path / name)
    record, array = tmp_path / "d.jsonl.lengths.npy.json", tmp_path / "d.jsonl.lengths.npy"
    if damage < len(RECORDS):
        record.write_bytes(RECORDS[damage])
        target = record
    else:
        kind = ARRAYS[damage - len(RECORDS)]
        good = np.load(array)
        if isinstance(kind, bytes):
            array.write_bytes(kind)
        elif kind is None:
            array.write_bytes(pickle_bytes())
        else:
            bad = {
                "float": good.astype(np.float64),
                "short": good[:2],
                "2d": np.stack([good, good]),
                "objects": np.array([1, "x"], dtype=object),
            }[kind]
            np.save(array, bad, allow_pickle=True)
        target = array
    forget_index(array)
    with pytest.raises(DatasetError) as caught:
        lengths_of(datareel.open_dataset(tmp_path / "d.jsonl"), np.array([0]), "index")
    message = str(caught.value)
    assert str(target) in message or f"length index {array} is stale" in message


def pickle_bytes() -> bytes:
    import pickle

    return pickle.dumps([1, 2, 3, 4])


@pytest.mark.parametrize(
    "part,data,named",
    [
        ("json", b'{"a": ' + b"9" * 5000 + b"}", r"part 'json': it holds an integer of more than 4,300 digits"),
        ("json", b"[" * 100_000 + b"]" * 100_000, r"part 'json': JSON nested too deeply to parse"),
        ("cls", b"9" * 5000, r"part 'cls': it holds an integer of more than"),
    ],
    ids=["json 5000 digits", "json 100,000 deep", "cls 5000 digits"],
)
def test_a_tar_part_python_cannot_parse_names_shard_key_and_part(tmp_path, part, data, named):
    write_shard(tmp_path / "d" / "s.tar", [("k0", {"txt": b"fine"}), ("k1", {"txt": b"x", part: data})])
    prepare_webdataset(tmp_path / "d", progress=False)
    source = datareel.open_dataset(tmp_path / "d")
    assert source.read(0)["txt"] == "fine"
    with pytest.raises(DatasetError, match=rf"s\.tar key 'k1': cannot decode {named}"):
        source.read(1)


# -- review of issue 25: a zero count, repeated keys, unknown .info.json keys, a non-UTF-8 JSONL line --


def info_edit(root: Path, **counts) -> None:
    """Set shard counts of ``root``'s ``.info.json`` (``p0=0``: ``parts/p-0.tar``) and put both shards in train."""
    meta = root / ".nv-meta"
    info = json.loads((meta / ".info.json").read_text())
    for shard, count in counts.items():
        info["shard_counts"][f"parts/p-{shard[1:]}.tar"] = count
    (meta / ".info.json").write_text(json.dumps(info))
    (meta / "split.yaml").write_text(yaml.safe_dump({"split_parts": {"train": ["parts/p-0.tar", "parts/p-1.tar"]}}))


@pytest.mark.parametrize("zero", ["p0", "p1"])
def test_a_zero_count_for_a_shard_that_holds_samples_is_refused_at_open(tmp_path, world, zero):
    """A count of 0 dropped the shard silently: the count-vs-index check ran on a shard's first read, and
    no sample of a 0-count shard is ever read. Now a 0-count shard is checked when the split is opened."""
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    info_edit(root, **{zero: 0})
    shard = root / "parts" / f"p-{zero[1:]}.tar"
    with pytest.raises(DatasetError, match=rf"index {shard}.idx holds 3 samples but .nv-meta/.info.json says 0"):
        datareel.open_dataset(root)
    with pytest.raises(DatasetError, match=r"holds 3 samples but .* says 0"):
        datareel.open_dataset(root, split=None)
    (root / "parts" / f"p-{zero[1:]}.tar.idx").unlink()
    with pytest.raises(DatasetError, match=rf"index file {shard}.idx is missing"):
        datareel.open_dataset(root)


@pytest.mark.workers
def test_a_shard_that_is_really_empty_opens_with_a_zero_count(tmp_path):
    root = tmp_path / "d"
    write_shard(root / "parts" / "p-0.tar", [("a", {"txt": b"x"})])
    write_shard(root / "parts" / "p-1.tar", [])
    prepare_webdataset(root, split_ratio="1,0,0", sample_type="CrudeWebdataset", progress=False)
    info_edit(root)
    assert json.loads((root / ".nv-meta" / ".info.json").read_text())["shard_counts"]["parts/p-1.tar"] == 0
    source = datareel.open_dataset(root)
    assert [source.read(i)["__key__"] for i in range(len(source))] == ["a"]
    (root / "parts" / "p-1.tar").write_bytes(b"\0" * 10)  # the empty shard truncated: its end blocks gone
    with pytest.raises(DatasetError, match=r"p-1.tar \(10 bytes\) no longer matches its index"):
        datareel.open_dataset(root)


DUPLICATES = {
    "dataset.yaml top level": (
        ".nv-meta/dataset.yaml",
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {a: 1}\nsubflavors: {b: 2}\n",
        r"line 4: key 'subflavors' appears twice \(first on line 3\): \{'a': 1\} and then \{'b': 2\}",
    ),
    "dataset.yaml nested": (
        ".nv-meta/dataset.yaml",
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {a: 1, a: 2}\n",
        r"line 3: key 'a' appears twice \(first on line 3\): 1 and then 2",
    ),
    "split.yaml split name": (
        ".nv-meta/split.yaml",
        "split_parts:\n  train: [parts/p-0.tar]\n  train: [parts/p-1.tar]\n",
        r"line 3: key 'train' appears twice \(first on line 2\)",
    ),
    "split.yaml top level": (
        ".nv-meta/split.yaml",
        "split_parts: {train: [parts/p-0.tar]}\nexclude: [parts/p-0.tar/crude01]\nexclude: [parts/p-0.tar/crude00]\n",
        r"line 3: key 'exclude' appears twice \(first on line 2\): \['parts/p-0.tar/crude01'\] and then "
        r"\['parts/p-0.tar/crude00'\]",
    ),
    ".info.json shard": (
        ".nv-meta/.info.json",
        '{"energon_version": "x", "shard_counts": {"parts/p-0.tar": 3, "parts/p-1.tar": 3, "parts/p-0.tar": 0}}',
        r": key 'parts/p-0.tar' appears twice in one object: 3 and then 0",
    ),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_a_key_repeated_in_a_metadata_file_is_refused_naming_file_line_and_values(tmp_path, world, case):
    """YAML (and JSON) keep the last of two equal keys: one of the values was dropped without a word."""
    name, text, named = DUPLICATES[case]
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    (root / name).write_text(text)
    with pytest.raises(DatasetError, match=named) as caught:
        read_everything(root)
    assert str(caught.value).startswith((f"{root / name} line ", f"{root / name}: "))


def test_a_key_repeated_after_an_empty_value_takes_the_later_value(tmp_path, world):
    """Energon's own split files write ``exclude: []`` and then the list: nothing is dropped, so it is read (the
    later value), as Energon reads it; an empty value repeated after a full one is still refused."""
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    split = root / ".nv-meta" / "split.yaml"
    split.write_text("split_parts: {train: [parts/p-0.tar]}\nexclude: []\n")
    everything = datareel.open_dataset(root)
    assert "crude00" in {everything.read(i)["__key__"] for i in range(len(everything))}
    split.write_text("split_parts: {train: [parts/p-0.tar]}\nexclude: []\nexclude: [parts/p-0.tar/crude00]\n")
    source = datareel.open_dataset(root)
    keys = {source.read(i)["__key__"] for i in range(len(source))}
    assert "crude00" not in keys and keys
    split.write_text("split_parts: {train: [parts/p-0.tar]}\nexclude: [parts/p-0.tar/crude00]\nexclude: []\n")
    with pytest.raises(DatasetError, match="key 'exclude' appears twice"):
        datareel.open_dataset(root)


def test_a_key_repeated_in_a_metadataset_is_refused(tmp_path, world):
    path = tmp_path / "m.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - path: {world / 'crude'}\n        weight: 1\n        weight: 5\n"
    )
    with pytest.raises(DatasetError, match=r"line 8: key 'weight' appears twice \(first on line 7\): 1 and then 5"):
        datareel.open_dataset(path)
    merged = tmp_path / "merged.yaml"  # a merge key's entries overridden by the mapping's own: YAML's rule, kept
    merged.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nbase: &b {path: x, weight: 1}\nsplits:\n"
        f"  train:\n    blend:\n      - <<: *b\n        path: {world / 'crude'}\n"
    )
    with pytest.raises(DatasetError, match=r"unknown key 'base'"):  # past the duplicate check
        datareel.open_dataset(merged)


@pytest.mark.parametrize(
    "info,named",
    [
        ({"shard_countz": {}}, r"unknown key 'shard_countz' \(did you mean 'shard_counts'\?\)"),
        ({"energon_verison": "7"}, r"unknown key 'energon_verison' \(did you mean 'energon_version'\?\)"),
        ({"splits": 1}, r"unknown key 'splits'; .*takes energon_version, shard_counts"),
    ],
)
def test_an_unknown_key_in_info_json_is_refused_with_a_did_you_mean(tmp_path, world, info, named):
    """Energon 7.4.1 writes energon_version and shard_counts only (its WebdatasetInfo); any other key was
    read as if absent."""
    root = tmp_path / "crude"
    shutil.copytree(world / "crude", root)
    path = root / ".nv-meta" / ".info.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **info}))
    with pytest.raises(DatasetError, match=named) as caught:
        datareel.open_dataset(root)
    assert str(caught.value).startswith(str(path))


def test_energon_writes_only_the_info_keys_datareel_takes(tmp_path):
    from megatron.energon.flavors.webdataset.structs import WebdatasetInfo
    from megatron.energon.typed_converter import to_json_object

    written = to_json_object(WebdatasetInfo(energon_version="7.4.1", shard_counts={"a.tar": 1}))
    assert set(written) == {"energon_version", "shard_counts"}


@pytest.mark.parametrize("line", [b"\xff\xfe", b'{"a": "\xff"}', b"\x80{}"])
def test_prepare_names_a_jsonl_line_that_is_not_utf8(tmp_path, line, capsys):
    from datareel.cli import main

    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"a": 1}\n\n' + line + b"\n")
    with pytest.raises(DatasetError, match=rf"{path} line 3: not valid UTF-8 \(invalid start byte at byte \d+"):
        prepare_jsonl(path)
    assert main(["prepare", str(path), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "not valid UTF-8" in err and "JSON object" not in err
