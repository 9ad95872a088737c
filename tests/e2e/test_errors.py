"""Every bad argument is an OptionError (a DatareelError and a ValueError) naming the value; every
problem with data on disk is a DatasetError; no other exception type escapes for these."""

from __future__ import annotations

import json

import pytest

import datareel
from datareel import DatareelError, DatasetError, OptionError, Packing, TopologyError

DATA = datareel.from_sequence(list(range(10)), name="d")
LOADER = dict(global_batch_size=4, micro_batch_size=2)
ENDLESS = datareel.mix([(DATA, 1), (datareel.from_sequence([1, 2], name="e"), 1)])

BAD_OPTIONS = {
    "seed": (lambda: datareel.Loader(DATA, seed=-1, **LOADER), "seed=-1"),
    "seed type": (lambda: datareel.Loader(DATA, seed="1", **LOADER), "seed='1'"),
    "on_error": (lambda: datareel.Loader(DATA, on_error="skip", **LOADER), "on_error='skip'"),
    "num_workers": (lambda: datareel.Loader(DATA, num_workers=-2, **LOADER), "num_workers=-2"),
    "prefetch without workers": (lambda: datareel.Loader(DATA, prefetch_factor=2, **LOADER), "prefetch_factor=2"),
    "prefetch_factor": (lambda: datareel.Loader(DATA, prefetch_factor=0, num_workers=1, **LOADER), "prefetch_factor=0"),
    "packing type": (lambda: datareel.Loader(DATA, packing="yes", **LOADER), "packing='yes'"),
    "repeat=False endless": (lambda: datareel.Loader(ENDLESS, repeat=False, **LOADER), "repeat=False"),
    "max_length": (lambda: Packing(max_length=0), "max_length=0"),
    "window": (lambda: Packing(max_length=8, window=2.5), "window=2.5"),
    "over_length": (lambda: Packing(max_length=8, over_length="cut"), "over_length='cut'"),
    "length": (lambda: Packing(max_length=8, length="tokens"), "length='tokens'"),
    "packing without packer": (
        lambda: datareel.Loader(DATA, packing=Packing(max_length=8, length="bytes"), **LOADER),
        "pack_selected_samples",
    ),
    "mix empty": (lambda: datareel.mix([]), "at least one"),
    "mix weight": (lambda: datareel.mix([(DATA, -1)]), "weight of 'd'=-1"),
    "mix nan": (lambda: datareel.mix([(DATA, float("nan"))]), "nan"),
    "mix pairs": (lambda: datareel.mix([DATA]), "(dataset, weight) pairs"),
    "repetitions": (lambda: datareel.mix_epochized([(DATA, 0)]), "repetitions of 'd'=0"),
    "concat": (lambda: datareel.concat([]), "concat"),
    "filter predicate": (lambda: datareel.filter(DATA, 3), "predicate=3"),
    "filter blend": (lambda: datareel.filter(ENDLESS, lambda m: True), "filter each source"),
    "filter length": (lambda: datareel.filter(DATA, lambda m: True, length="tokens"), "length='tokens'"),
    "from_sequence empty": (lambda: datareel.from_sequence([]), "len 0"),
    "from_sequence type": (lambda: datareel.from_sequence(5), "int"),
    "from_sequence name": (lambda: datareel.from_sequence([1], name=""), "name=''"),
}


@pytest.mark.parametrize("case", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_a_bad_argument_is_an_option_error_naming_the_value(case):
    call, named = case
    with pytest.raises(OptionError) as err:
        call()
    assert isinstance(err.value, ValueError) and isinstance(err.value, DatareelError)
    assert named in str(err.value)


@pytest.mark.parametrize(
    "kwargs,named",
    [
        (dict(global_batch_size=6, micro_batch_size=4), "micro_batch_size=4"),
        (dict(global_batch_size=0, micro_batch_size=1), "global_batch_size=0"),
        (dict(global_batch_size=4, micro_batch_size=True), "micro_batch_size=True"),
        (dict(global_batch_size=4, micro_batch_size=1, world_size=3, rank=0), "world_size=3"),
        (dict(global_batch_size=4, micro_batch_size=1, world_size=2, rank=2), "rank=2"),
    ],
)
def test_an_impossible_topology_is_a_topology_error(kwargs, named):
    with pytest.raises(TopologyError, match=named.replace("(", r"\(")):
        datareel.Loader(DATA, **kwargs)


def test_data_on_disk_problems_are_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        datareel.open_dataset(tmp_path / "missing")
    (tmp_path / "raw").mkdir()
    with pytest.raises(DatasetError, match="datareel prepare"):
        datareel.open_dataset(tmp_path / "raw")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n')
    with pytest.raises(DatasetError, match=r"\.jsonl\.idx|index"):
        datareel.open_dataset(bad)
    yaml_path = tmp_path / "blend.yaml"
    yaml_path.write_text(
        json.dumps(
            {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": {"train": {"path": "nowhere"}}}
        )
    )
    with pytest.raises(DatasetError):
        datareel.open_dataset(yaml_path)


def test_option_and_dataset_errors_are_distinct_families():
    assert issubclass(OptionError, ValueError) and not issubclass(DatasetError, ValueError)
    assert not issubclass(OptionError, DatasetError) and not issubclass(DatasetError, OptionError)
