"""What keys a prepared dataset's order (issue 36 item 12): its split and its layout in .nv-meta, not its folder's name.

Three copies of one dataset — prepared locally in ``ds/``, that directory uploaded to ``s3://bkt/localprep``,
and the raw shards uploaded to ``s3://bkt/raw`` and prepared there — read in one order with the same Loader
arguments, a checkpoint of one restores on the others, and ``datareel verify`` agrees. Other content or
another split is another order; an explicit ``name=`` wins; a state saved under another name (a checkpoint
of the previous release: ``ds/train``) is refused naming the one-line fix, and with it continues its order.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import datareel
from datareel.cli import main
from datareel.cli.prepare import prepare_webdataset
from s3_server import upload
from wds_helpers import build_shards

LOADER = dict(global_batch_size=6, micro_batch_size=3, world_size=1, seed=11, decode=False)


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


def _loader(dataset, **overrides):
    args = {**LOADER, **overrides}
    args.pop("decode")
    return datareel.Loader(dataset, task_encoder=Keys(), **args)


def _keys(dataset, steps: int = 8) -> list[str]:
    loader = _loader(dataset)
    it = iter(loader)
    out = [key for _ in range(steps) for key in next(it)["key"]]
    loader.close()
    return out


def _open(where, **kwargs):
    return datareel.open_dataset(where, decode=False, **kwargs)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """The three copies: local ``ds``, ``s3://bkt/localprep`` (ds uploaded) and ``s3://bkt/raw`` (prepared there)."""
    from s3_server import make_bucket, s3_server

    root = tmp_path_factory.mktemp("names")
    build_shards(root / "ds")
    shutil.copytree(root / "ds", root / "raw")  # the raw shards, never prepared locally
    prepare_webdataset(root / "ds", progress=False, workers=1)
    with s3_server():
        make_bucket("bkt")
        upload(root / "ds", "s3://bkt/localprep")
        upload(root / "raw", "s3://bkt/raw")
        assert main(["prepare", "s3://bkt/raw", "--quiet", "--workers", "1"]) == 0
        yield root, [str(root / "ds"), "s3://bkt/localprep", "s3://bkt/raw"]


def test_the_three_copies_read_in_one_order(copies):
    _, where = copies
    names = {_open(w).name for w in where}
    assert len(names) == 1 and names.pop().startswith("train@")
    orders = [_keys(_open(w)) for w in where]
    assert orders[0] == orders[1] == orders[2]
    assert sorted(set(orders[0])) == sorted({_open(where[0]).key(i) for i in range(17)})  # a real shuffle, all keys


@pytest.mark.parametrize("saved_on", [0, 1, 2])
def test_a_checkpoint_of_one_copy_restores_on_the_others_and_verify_agrees(copies, saved_on, tmp_path, capsys):
    _, where = copies
    loader = _loader(_open(where[saved_on]))
    it = iter(loader)
    for _ in range(4):  # two global batches: verify on world_size 2 resumes at a batch boundary
        next(it)
    state = loader.state_dict()
    expected = [next(it)["key"] for _ in range(3)]
    loader.close()
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    for other in where:
        resumed = _loader(_open(other))
        resumed.load_state_dict(state)
        it = iter(resumed)
        assert [next(it)["key"] for _ in range(3)] == expected, other
        resumed.close()
        capsys.readouterr()
        assert main(["verify", str(path), other, "--world-size", "2", "--micro-batch-size", "3", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["ok"] is True


def test_an_explicit_name_wins_everywhere(copies):
    _, where = copies
    named = [_open(w, name="corpus") for w in where]
    assert {d.name for d in named} == {"corpus"} and {d.fingerprint()["name"] for d in named} == {"corpus"}
    orders = [_keys(d) for d in named]
    assert orders[0] == orders[1] == orders[2] != _keys(_open(where[0]))


def _prepared(root: Path, shard_sizes=(4, 7, 1, 5), split_yaml: str | None = None) -> Path:
    build_shards(root, shard_sizes=shard_sizes, long_names=False)
    prepare_webdataset(root, progress=False, workers=1)
    if split_yaml is not None:
        (root / ".nv-meta" / "split.yaml").write_text(split_yaml)
    return root


def test_other_content_or_another_split_is_another_order(tmp_path):
    base = _open(_prepared(tmp_path / "a"))
    again = _open(_prepared(tmp_path / "b"))  # the same shards prepared again, in another folder
    assert base.name == again.name and _keys(base) == _keys(again)
    # another count in one shard (the same shard names); another shard name (the same counts)
    more = _open(_prepared(tmp_path / "c", shard_sizes=(4, 7, 2, 4)))
    moved = tmp_path / "d"
    _prepared(moved)
    info = json.loads((moved / ".nv-meta" / ".info.json").read_text())
    (moved / "parts" / "data-3.tar").rename(moved / "parts" / "data-9.tar")
    (moved / "parts" / "data-3.tar.idx").rename(moved / "parts" / "data-9.tar.idx")
    info["shard_counts"] = {k.replace("data-3", "data-9"): v for k, v in info["shard_counts"].items()}
    (moved / ".nv-meta" / ".info.json").write_text(json.dumps(info))
    (moved / ".nv-meta" / "split.yaml").write_text(
        "split_parts:\n  train:\n  - parts/data-0.tar\n  - parts/data-1.tar\n  - parts/data-2.tar\n"
        "  - parts/data-9.tar\n  val: []\n  test: []\n"
    )
    renamed = _open(moved)
    # the same shards as two splits: one content, two names, two orders
    shards = "  - parts/data-0.tar\n  - parts/data-1.tar\n  - parts/data-2.tar\n  - parts/data-3.tar\n"
    two = _prepared(tmp_path / "e", split_yaml=f"split_parts:\n  train:\n{shards}  val:\n{shards}  test: []\n")
    train, val = _open(two), _open(two, split="val")
    # one sample excluded by key
    excluded = "exclude:\n- parts/data-0.tar/s00003\n"
    excluding = _prepared(tmp_path / "f", split_yaml=f"split_parts:\n  train:\n{shards}  val: []\n{excluded}")
    fewer = _open(excluding)
    others = [more, renamed, val, fewer]
    assert len({d.name for d in [base, *others]}) == 5 and train.name == base.name
    for other in others:
        assert _keys(other) != _keys(base), other.name
    assert sorted(_keys(val, 12)) != _keys(val, 12) and _keys(val) != _keys(train)  # same samples, other order


def test_a_state_saved_under_another_name_is_refused_naming_the_fix(tmp_path, capsys):
    """A checkpoint of the previous release named the dataset by its folder ("ds/train"): refused, with the
    fix in the message (and in verify's); with the fix, it continues on its own order."""
    ds = _prepared(tmp_path / "ds")
    old = _loader(_open(ds, name="ds/train"))  # what the previous release's default was
    it = iter(old)
    for _ in range(2):
        next(it)
    state = old.state_dict()
    expected = next(it)["key"]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    fresh = _loader(_open(ds))
    with pytest.raises(datareel.StateMismatchError) as refused:
        fresh.load_state_dict(state)
    message = str(refused.value)
    assert "open_dataset(..., name='ds/train')" in message and "--name ds/train" in message
    assert "by its folder" in message  # says why the default changed
    capsys.readouterr()
    argv = ["verify", str(path), str(ds), "--world-size", "1", "--micro-batch-size", "3"]
    assert main(argv) == 1 and "name='ds/train'" in capsys.readouterr().out
    assert main([*argv, "--name", "ds/train"]) == 0
    fixed = _loader(_open(ds, name="ds/train"))
    fixed.load_state_dict(state)
    assert next(iter(fixed))["key"] == expected
    # any other name mismatch names its fix too (a deliberate name changed)
    with pytest.raises(datareel.StateMismatchError, match=r"open_dataset\(\.\.\., name='ds/train'\)"):
        _loader(_open(ds, name="corpus")).load_state_dict(state)


def test_a_blend_saved_under_folder_names_names_the_fix(tmp_path):
    a, b = _prepared(tmp_path / "a"), _prepared(tmp_path / "b", shard_sizes=(3, 3))
    saved = datareel.mix([(_open(a, name="a/train"), 1.0), (_open(b, name="b/train"), 1.0)])
    loader = _loader(saved)
    next(iter(loader))
    state = loader.state_dict()
    now = datareel.mix([(_open(a), 1.0), (_open(b), 1.0)])
    with pytest.raises(datareel.StateMismatchError, match=r"open_dataset\(\.\.\., name='a/train'\)"):
        _loader(now).load_state_dict(state)


def test_the_golden_state_of_a_default_named_dataset_is_refused_naming_its_old_name(tmp_path):
    """The golden packed_bytes state (datareel 0.1.0, default name "wds/train") restores with the fix (the
    golden test builds it so); built as it was then, without a name, the refusal names that fix."""
    from golden import GOLDEN, WdsPacker, write_wds

    entry = next(e for e in json.loads(GOLDEN.read_text())["entries"] if e["recipe"] == "packed_bytes")
    root = write_wds(tmp_path / "wds")
    loader = datareel.Loader(
        _open(root),
        global_batch_size=4,
        seed=6,
        task_encoder=WdsPacker(),
        packing=datareel.Packing(max_length=4096, length="bytes", window=10, over_length="drop"),
        rank=0,
        world_size=2,
        micro_batch_size=2,
    )
    with pytest.raises(datareel.StateMismatchError, match=r"name='wds/train'"):
        loader.load_state_dict(json.loads(entry["state"]))
