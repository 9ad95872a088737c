"""The shipped checker splits every batch the Loader makes back into samples (issue 36 item 13).

``check_restore_everywhere`` compares per-sample records, so it must split a micro-batch of any shape: a
``.json`` part collated into a dict column (``KeyError: 0`` before), nested dicts and lists, tuples and
namedtuples, tensors and numpy arrays, strings and bytes, ``None``, dataclass batches, tuple batches, and a
``batch`` of the encoder's own that lists its samples (columns of dicts). Property test: random nested
sample structures through the real Loader collation (the default one and three ``batch`` styles), then the
checker; each record also equals the sample it came from. A field that belongs to no sample is named.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

import datareel
from datareel.cli.prepare import prepare_webdataset
from datareel.testing import Topology, check_restore_everywhere, make_ranks, take_micro_step, to_python, unbatch
from profiles import examples

Pair = namedtuple("Pair", ["left", "right"])

LEAVES = ["int", "float", "str", "bytes", "tensor", "array"]


def build(template: Any, i: int) -> Any:
    """The sample value of ``template`` for item ``i`` (every leaf depends on ``i``)."""
    kind, inner = template
    if kind == "int":
        return i * 7
    if kind == "float":
        return i / 4
    if kind == "str":
        return f"s{i}"
    if kind == "bytes":
        return f"b{i}".encode()
    if kind == "none":
        return None
    if kind == "tensor":
        return torch.arange(2) + i
    if kind == "array":
        return np.full(3, i, dtype=np.int64)
    if kind == "dict":
        return {k: build(v, i) for k, v in inner.items()}
    if kind == "list":
        return [build(v, i) for v in inner]
    if kind == "tuple":
        return tuple(build(v, i) for v in inner)
    if kind == "pair":
        return Pair(build(inner[0], i), build(inner[1], i))
    raise KeyError(kind)


def templates(none: bool) -> st.SearchStrategy:
    leaves = st.sampled_from(LEAVES + (["none"] if none else [])).map(lambda k: (k, None))
    keys = st.sampled_from(["a", "b", "c", "json"])

    def containers(children: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.dictionaries(keys, children, min_size=1, max_size=3).map(lambda d: ("dict", d)),
            st.lists(children, max_size=3).map(lambda items: ("list", items)),
            st.lists(children, min_size=1, max_size=3).map(lambda items: ("tuple", items)),
            st.tuples(children, children).map(lambda items: ("pair", items)),
        )

    return st.recursive(leaves, containers, max_leaves=8)


@dataclasses.dataclass
class Record:
    """A dataclass sample (the default collation makes a dict batch of its fields)."""

    i: int
    value: Any


@dataclasses.dataclass
class Batch:
    """A dataclass batch, as Energon's batch types: per-sample lists beside a collated column."""

    ids: list
    stacked: Any
    note: Any = None


class Encoder:
    """Builds each sample from its item's ``i``; ``style`` picks the batch the Loader makes of them."""

    def __init__(self, template: Any, style: str, record: bool):
        self.template, self.style, self.record = template, style, record

    def encode_sample(self, sample):
        i = sample["i"]
        if self.record:
            return Record(i, build(self.template, i))
        return {"i": i, "value": build(self.template, i), "__note__": None}


class Listed(Encoder):
    def batch(self, samples):  # a column of dicts: the samples as they are
        return {"samples": samples}


class Dataclassed(Encoder):
    def batch(self, samples):
        return Batch(ids=[_get(s, "i") for s in samples], stacked=default_collate([_get(s, "i") for s in samples]))


class Tupled(Encoder):
    def batch(self, samples):  # fields: a tensor and a list of the samples' values
        return (torch.tensor([_get(s, "i") for s in samples]), [_get(s, "value") for s in samples])


def _get(sample: Any, key: str) -> Any:
    return getattr(sample, key) if dataclasses.is_dataclass(sample) else sample[key]


STYLES = {"default": Encoder, "listed": Listed, "dataclass": Dataclassed, "tuple": Tupled}
DATA = datareel.from_sequence([{"i": i} for i in range(11)], name="items")


def _value(record: dict, style: str) -> tuple[int, Any]:
    """(item, value) a record holds, whatever the batch style."""
    if style == "listed":
        return record["samples"]["i"], record["samples"]["value"]
    if style == "dataclass":
        return record["ids"], None
    if style == "tuple":
        return record["__sample__"][0], record["__sample__"][1]
    return record["i"], record["value"]


@settings(max_examples=examples(0.1))
@given(data=st.data(), style=st.sampled_from(sorted(STYLES)), record=st.booleans())
def test_every_batch_the_loader_makes_splits_into_its_samples_and_restores_everywhere(data, style, record):
    template = data.draw(templates(none=style != "default"), label="template")
    encoder = STYLES[style](template, style, record)
    common = dict(global_batch_size=4, seed=3, task_encoder=encoder)
    # each record is the sample it came from (positions from the batch, or from the loader's reel)
    ranks = make_ranks(DATA, world_size=2, micro_batch_size=2, **common)
    iterators = [iter(loader) for loader in ranks]
    for _ in range(3):
        records = take_micro_step(iterators)
        assert len(records) == 4 and [r["__positions__"] for r in records] == sorted(
            r["__positions__"] for r in records
        )
        for r in records:
            i, value = _value(r, style)
            if value is not None:
                assert value == to_python(build(template, i))
    report = check_restore_everywhere(
        DATA, before=Topology(2, 0, 1), after=Topology(1, 0, 2), global_batches=2, **common
    )
    assert report["restored"] == report["steps"] == 4


def test_a_dataset_with_a_json_part_restores_everywhere(tmp_path):
    """The reported case: a .json part collates into a dict column (KeyError: 0 in unbatch before)."""
    root = tmp_path / "j"
    (root / "parts").mkdir(parents=True)
    with tarfile.open(root / "parts" / "a.tar", "w") as tar:
        for i in range(13):
            parts = {"json": json.dumps({"id": i, "tags": ["x", f"t{i}"], "meta": {"w": i / 2}}), "txt": f"text {i}"}
            for part, text in parts.items():
                data = text.encode()
                info = tarfile.TarInfo(f"k{i:03d}.{part}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    prepare_webdataset(root, progress=False, workers=1)
    dataset = datareel.open_dataset(root)
    report = check_restore_everywhere(
        dataset, global_batch_size=4, before=Topology(2, 0, 1), after=Topology(1, 0, 2), global_batches=3
    )
    assert report == {"restored": 6, "refused": 0, "steps": 6, "end": 12}
    loader = datareel.Loader(dataset, global_batch_size=4, micro_batch_size=4, seed=0)
    for record in unbatch(next(iter(loader))):
        i = int(record["__key__"][1:])
        assert (
            record["json"] == {"id": i, "tags": ["x", f"t{i}"], "meta": {"w": i / 2}} and record["txt"] == f"text {i}"
        )


class Summed:
    """encode_batch adds one value for the whole micro-batch, which no sample owns."""

    def encode_batch(self, batch):
        return {**batch, "total": torch.tensor(sum(batch["id"].tolist()))}


class Joined:
    def batch(self, samples):
        return {"ids": torch.tensor([s["id"] for s in samples]), "label": "+".join(str(s["id"]) for s in samples)}


@pytest.mark.parametrize(
    ("encoder", "field", "what"),
    [(Summed(), r"batch\['total'\]", r"a Tensor of shape \(\)"), (Joined(), r"batch\['label'\]", r"'[0-9+]+' \(str\)")],
)
def test_a_field_that_belongs_to_no_sample_is_named(encoder, field, what):
    data = datareel.from_sequence([{"id": i} for i in range(8)], name="ids")
    with pytest.raises(datareel.DatareelError, match=f"cannot split field {field} .*it is {what}"):
        check_restore_everywhere(
            data, global_batch_size=4, before=Topology(2, 0, 1), after=Topology(1, 0, 2), task_encoder=encoder, seed=0
        )


def test_ambiguous_lists_follow_the_collation():
    """Two samples, each with a pair of 2-row tensors: the default collation transposes the pair (two entries,
    each a column of 2); a batch of the user's that lists the samples gives one entry per sample."""
    transposed = [torch.tensor([[0, 0], [1, 1]]), torch.tensor([[2, 2], [3, 3]])]
    assert unbatch({"pair": transposed, "__positions__": [0, 1]})[0]["pair"] == [[0, 0], [2, 2]]
    listed = unbatch({"images": transposed, "__positions__": [0, 1]}, collated=False)
    assert [r["images"] for r in listed] == [[[0, 0], [1, 1]], [[2, 2], [3, 3]]]
