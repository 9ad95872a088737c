"""Every reader of a metadataset rides one walk (``datareel.formats.metadataset.walk``), so they read one tree:
the blend datareel builds (``open_dataset``), ``datareel info``, and the Energon facade's ``traverse`` and
``get_datasets`` name the same leaves, in the same order, with the same split parts and subflavors, and the
facade's absolute weights and repetitions are the products of the builder's.  Random trees: blends or
``blend_epochized`` nested in each other, subflavors on any entry (outer over inner), ``split_part`` given,
``null`` or left out, and a nested metadataset in another directory read through its own split part."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.blend.tree import Blend, EpochizedMix, Mix
from datareel.energon.metadataset import load_dataset
from datareel.energon.metadataset.loader import traverse_metadataset
from datareel.errors import DatasetError
from datareel.formats.metadataset.info import metadataset_info
from datareel.sources.view import SourceView
from profiles import examples
from wds_helpers import write_shard

HEADER = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from datareel.cli.prepare import prepare_webdataset

    root = tmp_path_factory.mktemp("readers")
    for name in ("a", "b"):
        for s in range(2):
            write_shard(root / name / f"part-{s}.tar", [(f"{name}{s}-{i}", {"txt": b"x"}) for i in range(6)])
        prepare_webdataset(root / name, split_ratio="1,1,0", progress=False)
    (root / "sub").mkdir()
    return root


def leaf(prefix: str):
    return st.builds(
        lambda name, flavors, part: {"path": f"{prefix}{name}", **flavors, **part},
        st.sampled_from(["a", "b"]),
        st.sampled_from([{}, {"subflavors": {"k": 1}}, {"subflavors": {"k": 2, "j": 0}}]),
        st.sampled_from([{}, {"split_part": "val"}, {"split_part": None}, {"split_part": ""}, {"split_part": "train"}]),
    )


def tree(prefix: str, kind: str, extra=None):
    key = "weight" if kind == "blend" else "repetitions"
    item = st.fixed_dictionaries({key: st.integers(1, 4)})

    def blend(children):
        return st.builds(
            lambda items, flavors: {kind: items, **flavors},
            st.lists(st.tuples(children, item).map(lambda p: {**p[0], **p[1]}), min_size=1, max_size=3),
            st.sampled_from([{}, {"subflavors": {"k": 3}}]),
        )

    return st.recursive(leaf(prefix) if extra is None else leaf(prefix) | extra, blend, max_leaves=5)


def write(path: Path, node) -> None:
    path.write_text(yaml.safe_dump({**HEADER, "splits": {"train": node, "val": node}}, sort_keys=False))


def unviewed(source):
    while isinstance(source, SourceView):
        source = source.base
    return source


def builder_leaves(dataset, share=1.0):
    """(root, split, subflavors, share) of each leaf of datareel's blend, shares multiplied down."""
    if not isinstance(dataset, Blend):
        dataset = unviewed(dataset)
        return [(Path(str(dataset.root)).resolve(), dataset.split.name, dataset.subflavors, share)]
    params = list(dataset.params())
    if isinstance(dataset, Mix):
        params = [p / sum(params) for p in params]
    assert isinstance(dataset, (Mix, EpochizedMix)), dataset
    return [leaf for child, p in zip(dataset.children, params) for leaf in builder_leaves(child, share * p)]


def expected(node, split, flavors, share, inner):
    """(dataset name, split, subflavors, share) of each leaf, read from the drawn trees by the rules of the module
    doc (``inner``: the nested file's tree, the same in each of its splits)."""
    flavors = {**(node.get("subflavors") or {}), **flavors}  # the outer values win
    if "path" in node:
        part = node.get("split_part") or split
        if node["path"].endswith(".yaml"):
            return expected(inner, part, flavors, share, inner)
        return [(node["path"].rpartition("/")[2], part, flavors, share)]
    kind = "blend" if "blend" in node else "blend_epochized"
    items = node[kind]
    numbers = [item["weight"] if kind == "blend" else item["repetitions"] for item in items]
    total = sum(numbers) if kind == "blend" else 1
    return [
        leaf for item, n in zip(items, numbers) for leaf in expected(item, split, flavors, share * n / total, inner)
    ]


@settings(max_examples=examples(0.5), deadline=None)
@given(data=st.data(), kind=st.sampled_from(["blend", "blend_epochized"]))
def test_every_reader_reads_the_same_tree(world, data, kind):
    nested = {"path": "sub/inner.yaml"}
    outer = data.draw(tree("", kind, st.sampled_from([nested, {**nested, "split_part": "val"}])), label="top")
    inner = data.draw(tree("../", kind), label="inner")
    write(world / "sub" / "inner.yaml", inner)
    write(world / "top.yaml", outer)
    top = world / "top.yaml"

    built = builder_leaves(datareel.open_dataset(top, split="train"))
    listed = [(Path(d["path"]).resolve(), d["split_part"]) for d in metadataset_info(top)["datasets"]]
    references = traverse_metadataset(top, split_part="train")
    traversed = [(Path(str(r.path)).resolve(), r.split_part, r.subflavors) for r in references]
    loaded = load_dataset(top).get_datasets(training=True, split_part="train", worker_config=None)

    want = expected(outer, "train", {}, 1.0, inner)
    assert [(root.name, split, flavors) for root, split, flavors, _ in built] == [w[:3] for w in want]
    assert all(math.isclose(b[3], w[3], rel_tol=1e-12) for b, w in zip(built, want)), (built, want)
    assert [(root, split, flavors) for root, split, flavors, _ in built] == traversed
    assert [(root, split) for root, split, _, _ in built] == listed[: len(built)]  # info lists train, then val
    factories = [d.dataset for d in loaded.datasets]
    assert [(Path(str(f.path)).resolve(), f.split_part, unviewed(f.dataset).subflavors) for f in factories] == [
        (root, split, flavors) for root, split, flavors, _ in built
    ]
    if isinstance(datareel.open_dataset(top, split="train"), Blend):
        field = "weight" if kind == "blend" else "repetitions"
        for ours, (_, _, _, share) in zip(loaded.datasets, built):
            assert math.isclose(getattr(ours, field), share, rel_tol=1e-12), (ours, share)


@pytest.mark.parametrize("reader", ["open_dataset", "info", "traverse", "get_datasets", "views"])
def test_every_reader_names_a_cycle_of_files(tmp_path, reader):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "a.yaml", {"blend": [{"path": "sub/b.yaml", "weight": 1}]})
    write(tmp_path / "sub" / "b.yaml", {"path": "../a.yaml"})
    read = {
        "open_dataset": lambda p: datareel.open_dataset(p),
        "info": metadataset_info,
        "traverse": lambda p: traverse_metadataset(p, split_part="train"),
        "get_datasets": lambda p: load_dataset(p).get_datasets(training=True, split_part="train", worker_config=None),
        "views": lambda p: load_dataset(p).splits["train"].blend[0]._dataset.splits["train"]._dataset,
    }[reader]
    with pytest.raises(DatasetError, match=r"include each other in a cycle"):
        read(tmp_path / "a.yaml")


def test_prepare_names_a_cycle_of_files(tmp_path):
    from datareel.energon.metadataset.loader import load_metadataset_file

    (tmp_path / "sub").mkdir()
    write(tmp_path / "a.yaml", {"blend": [{"path": "sub/b.yaml", "weight": 1}]})
    write(tmp_path / "sub" / "b.yaml", {"path": "../a.yaml"})
    with pytest.raises(DatasetError, match=r"include each other in a cycle"):
        load_metadataset_file(tmp_path / "a.yaml").prepare()


def test_info_lists_past_what_it_cannot_read_and_names_a_file_that_is_missing(world):
    """``datareel info`` is lenient about entries (opening the metadataset names them) but not about files."""
    write(world / "odd.yaml", {"blend": [{"path": "a", "weight": 1, "subflavors": [1]}, 7, {"path": "b"}]})
    listed = metadataset_info(world / "odd.yaml")["datasets"]
    assert [Path(d["path"]).name for d in listed] == ["a", "b", "a", "b"]  # train, then val
    write(world / "gone.yaml", {"blend": [{"path": "a", "weight": 1}, {"path": "sub/nope.yaml", "weight": 1}]})
    with pytest.raises(DatasetError, match=r"nope\.yaml"):
        metadataset_info(world / "gone.yaml")


def test_a_file_may_include_another_split_of_itself_as_energon_traverses_it(world):
    """A cycle is a split that comes back: ``top.yaml`` train includes ``sub/back.yaml`` val, which includes
    ``top.yaml`` val (a dataset): a finite tree, which megatron.energon's ``traverse_metadataset`` reads too."""
    from megatron.energon.metadataset.loader import traverse_metadataset as energon_traverse

    (world / "sub").mkdir(exist_ok=True)
    top, back = world / "self.yaml", world / "sub" / "back.yaml"
    splits = {"train": {"blend": [{"path": "sub/back.yaml", "weight": 1, "split_part": "val"}]}, "val": {"path": "b"}}
    top.write_text(yaml.safe_dump({**HEADER, "splits": splits}))
    back.write_text(yaml.safe_dump({**HEADER, "splits": {"val": {"path": "../self.yaml"}}}))
    theirs = [(Path(str(r.path)), r.split_part) for r in energon_traverse(str(top), split_part="train")]
    ours = [(Path(str(r.path)), r.split_part) for r in traverse_metadataset(top, split_part="train")]
    assert ours == theirs == [(world / "b", "val")]
    assert [(Path(d["path"]), d["split_part"]) for d in metadataset_info(top)["datasets"]][:1] == ours
    (leaf,) = builder_leaves(datareel.open_dataset(top, split="train"))
    assert (leaf[0], leaf[1]) == ((world / "b").resolve(), "val")
