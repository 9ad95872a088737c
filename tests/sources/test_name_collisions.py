"""Two different datasets with one layout share a default name; a blend of them is refused (issue 36 item 12).

A prepared split's default name is a digest of its layout in ``.nv-meta`` (shard paths, counts, excluded
keys), so datasets A and B below — same shard names and counts, other bytes — are both ``train@<digest>``.
A checkpoint records leaves by name, weight and description, so a state of ``mix([(A, 3), (B, 1)])`` would
continue ``mix([(B, 3), (A, 1)])`` without a word: such a blend is refused naming both places and the fix;
with ``name=`` it works and the swapped blend refuses the state; one dataset used twice still works.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import OptionError
from wds_helpers import write_shard

LOADER = dict(global_batch_size=4, micro_batch_size=2, world_size=1, seed=5)


class Text:
    def encode_sample(self, sample):
        return {"text": sample["txt"]}


def _dataset(root: Path, tag: str) -> Path:
    """Two shards of 3 and 2 samples, keys k00000.., text ``<tag> <i>``: one layout, other bytes per tag."""
    for s, ids in enumerate([range(0, 3), range(3, 5)]):
        write_shard(root / f"part-{s}.tar", [(f"k{i:05d}", {"txt": f"{tag} {i}".encode()}) for i in ids])
    prepare_webdataset(root, progress=False, workers=1)
    return root


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("collide")
    return _dataset(root / "a", "alpha"), _dataset(root / "b", "beta")


def _open(path: Path, **kwargs):
    return datareel.open_dataset(path, decode=False, **kwargs)


def _loader(dataset):
    return datareel.Loader(dataset, task_encoder=Text(), **LOADER)


def _refused(dataset, where: list[Path]) -> str:
    with pytest.raises(OptionError) as refused:
        _loader(dataset)
    text = str(refused.value)
    for place in where:
        assert str(place) in text
    assert "name=" in text and "open_dataset(" in text
    return text


def test_the_two_datasets_share_a_default_name(pair):
    a, b = (_open(p) for p in pair)
    assert a.name == b.name and a.name.startswith("train@") and a.read(0)["txt"] != b.read(0)["txt"]


@pytest.mark.parametrize(
    "blend",
    [
        lambda a, b: datareel.mix([(a, 3), (b, 1)]),
        lambda a, b: datareel.mix([(b, 3), (a, 1)]),
        lambda a, b: datareel.mix_epochized([(a, 1), (b, 2)]),
        lambda a, b: datareel.concat([a, b]),
        lambda a, b: datareel.mix([(datareel.concat([a]), 1), (datareel.mix([(b, 1)]), 1)]),  # nested
    ],
    ids=["mix", "mix-swapped", "mix_epochized", "concat", "nested"],
)
def test_a_blend_of_two_datasets_with_one_name_is_refused(pair, blend):
    a, b = (_open(p) for p in pair)
    text = _refused(blend(a, b), list(pair))
    assert a.name in text


def test_two_metadatasets_naming_their_datasets_alike_are_refused(pair, tmp_path):
    yamls = []
    for i, data in enumerate(pair):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "ds").symlink_to(data, target_is_directory=True)
        spec = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
        spec["splits"] = {"train": {"blend": [{"weight": 1, "path": "ds"}]}}
        (folder / "m.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        yamls.append(folder / "m.yaml")
    one, two = (_open(y) for y in yamls)
    assert one.leaves()[0].name == two.leaves()[0].name == "ds/train"
    _refused(datareel.mix([(one, 3), (two, 1)]), [tmp_path / "m0" / "ds", tmp_path / "m1" / "ds"])


def test_with_names_they_blend_and_a_state_of_one_mix_is_refused_by_the_swapped_mix(pair):
    def named():
        return _open(pair[0], name="alpha"), _open(pair[1], name="beta")

    a, b = named()
    loader = _loader(datareel.mix([(a, 3), (b, 1)]))
    it = iter(loader)
    seen = [t for _ in range(3) for t in next(it)["text"]]
    assert {t.split()[0] for t in seen} == {b"alpha", b"beta"}
    state = loader.state_dict()
    loader.close()
    a, b = named()
    swapped = _loader(datareel.mix([(b, 3), (a, 1)]))
    with pytest.raises(datareel.StateMismatchError):
        swapped.load_state_dict(state)
    swapped.close()
    a, b = named()
    again = _loader(datareel.mix([(a, 3), (b, 1)]))
    again.load_state_dict(state)  # the same mixture continues
    again.close()
    _loader(datareel.concat([a, b])).close()


def test_one_dataset_twice_still_blends(pair):
    whole = _open(pair[0])
    from datareel.sources.view import SourceView

    first, second = SourceView(whole, start=0, stop=2), SourceView(whole, start=2, stop=5)
    for blend in (
        datareel.mix([(whole, 1), (_open(pair[0]), 2)]),
        datareel.concat([first, second]),
        datareel.mix_epochized([(first, 1), (second, 2)]),
    ):
        loader = _loader(blend)
        next(iter(loader))
        loader.close()
