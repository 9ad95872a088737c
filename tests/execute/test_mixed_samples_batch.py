"""The default ``batch()`` refuses a micro-batch that mixes dataclass and dict samples (a metadataset
blending a crude webdataset and a typed one, say) with the same named error whichever comes first: it
was a bare ``TypeError`` from ``dataclasses.fields`` when the dataclass came first."""

from __future__ import annotations

import dataclasses
import re

import pytest

from datareel.errors import DatareelError
from datareel.execute.encoder import DefaultTaskEncoder


@dataclasses.dataclass
class Text:
    __key__: str
    text: str


@dataclasses.dataclass
class Other:
    __key__: str
    tokens: int


RECORD = Text("a", "hello")
SAME_KEYS = {"__key__": "b", "text": "world"}


@pytest.mark.parametrize(
    "samples",
    [
        [RECORD, SAME_KEYS],
        [SAME_KEYS, RECORD],
        [RECORD, RECORD, {"__key__": "b", "txt": b"x"}],
        [{"__key__": "b", "txt": b"x"}, RECORD],
        [RECORD, "a string"],
        [RECORD, 3],
        [SAME_KEYS, 3],
        [RECORD, Other("c", 4)],
    ],
    ids=[
        "dataclass-dict",
        "dict-dataclass",
        "dataclass-crude",
        "crude-dataclass",
        "dataclass-str",
        "dataclass-int",
        "dict-int",
        "two-dataclasses",
    ],
)
def test_mixed_samples_are_the_named_error_whichever_comes_first(samples):
    with pytest.raises(DatareelError, match=re.escape("samples differ in keys")) as caught:
        DefaultTaskEncoder().batch(samples)
    assert "give the task encoder its own batch()" in str(caught.value)


def test_samples_of_one_kind_still_collate():
    assert DefaultTaskEncoder().batch([RECORD, Text("b", "x")]) == {"__key__": ["a", "b"], "text": ["hello", "x"]}
    assert DefaultTaskEncoder().batch([SAME_KEYS, dict(SAME_KEYS)])["__key__"] == ["b", "b"]
