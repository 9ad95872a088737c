"""``from_sequence`` checkpoints protect the sequence's content (issue 25, item 3): a state saved on one
sequence is refused by a sequence of the same name and length holding other items, through a digest
of items sampled at fixed positions; what the digest cannot see is documented and shown here too."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import datareel
from datareel.errors import OptionError, StateMismatchError
from datareel.sources.sequence import SAMPLED, content_digest, sample_positions


def loader_on(seq, **kwargs):
    return datareel.Loader(
        datareel.from_sequence(seq, name="data", **kwargs), global_batch_size=4, micro_batch_size=4, seed=1
    )


def saved_state(seq, **kwargs):
    loader = loader_on(seq, **kwargs)
    next(iter(loader))
    return loader.state_dict()


ITEMS = [{"id": i, "text": f"t{i}"} for i in range(100)]


def test_other_items_with_the_same_name_and_length_are_refused_naming_what_is_compared():
    state = saved_state(ITEMS)
    other = [{"id": i + 1000, "text": f"other {i}"} for i in range(100)]
    with pytest.raises(StateMismatchError, match="content") as caught:
        loader_on(other).load_state_dict(state)
    message = str(caught.value)
    assert "'content'" in message and "32 items read at fixed positions spread evenly" in message
    assert "Not seen" in message and "positions that are not sampled" in message
    assert "dataset" in caught.value.differences


def test_the_same_items_in_a_new_object_restore_and_continue():
    state = saved_state(ITEMS)
    reference = loader_on(ITEMS)
    it = iter(reference)
    next(it)
    expected = next(it)
    again = loader_on([dict(item) for item in ITEMS])  # equal items, other objects
    again.load_state_dict(state)
    got = next(iter(again))
    assert str(got) == str(expected)


def test_a_change_at_a_sampled_position_is_refused_and_elsewhere_is_not_seen():
    positions = sample_positions(len(ITEMS))
    assert len(positions) == SAMPLED and positions[0] == 0 and positions[-1] == len(ITEMS) - 1
    state = saved_state(ITEMS)
    for position in (0, positions[7], len(ITEMS) - 1):
        changed = [dict(item) for item in ITEMS]
        changed[position]["text"] = "edited"
        with pytest.raises(StateMismatchError):
            loader_on(changed).load_state_dict(state)
    unsampled = next(p for p in range(len(ITEMS)) if p not in positions)
    changed = [dict(item) for item in ITEMS]
    changed[unsampled]["text"] = "edited"
    loader_on(changed).load_state_dict(state)  # documented: not seen


def test_short_sequences_sample_every_item():
    assert sample_positions(1) == [0]
    assert sample_positions(5) == [0, 1, 2, 3, 4]
    assert sample_positions(SAMPLED) == list(range(SAMPLED))
    assert len(set(sample_positions(10**12))) == SAMPLED


@dataclasses.dataclass
class Point:
    x: int
    tags: list


class Opaque:
    def __init__(self, value):
        self.value = value


def varied_items():
    """One of each type the digest reads by value, plus an opaque object."""
    return [
        {"b": 2, "a": [1, 2.5, None, True], "s": {3, 1, 2}, "blob": b"\x00\xff"},
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array(["x", 1], dtype=object),
        np.int64(7),
        torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(),  # non-contiguous, no numpy dtype
        torch.tensor([True, False]),
        Image.new("RGB", (3, 2), (10, 20, 30)),
        Point(1, ["a"]),
        b"y" * (3 << 20),  # a big buffer: size and three blocks
        Opaque(1),
        float("nan"),
        10**5000,  # an int past the string conversion limit
        "é\ud800",  # a lone surrogate
    ]


def test_common_item_types_are_read_by_value():
    base = content_digest(varied_items(), 13)
    assert base is not None and base == content_digest(varied_items(), 13)
    changes = {
        0: {"b": 2, "a": [1, 2.5, None, False], "s": {3, 1, 2}, "blob": b"\x00\xff"},
        1: np.arange(12, dtype=np.float64).reshape(3, 4),
        4: torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        5: torch.tensor([True, True]),
        6: Image.new("RGB", (3, 2), (10, 20, 31)),
        7: Point(1, ["b"]),
        8: b"y" * (3 << 20 - 1) + b"z",
    }
    for position, value in changes.items():
        items = varied_items()
        items[position] = value
        assert content_digest(items, 13) != base, position


def test_dict_and_set_order_do_not_count_and_opaque_objects_count_by_class_only():
    assert content_digest([{"a": 1, "b": 2}], 1) == content_digest([{"b": 2, "a": 1}], 1)
    assert content_digest([Opaque(1)], 1) == content_digest([Opaque(2)], 1)  # documented: class name only
    assert content_digest([Opaque(1)], 1) != content_digest([Point(1, [])], 1)


SCRIPT = """
import sys, json
sys.path.insert(0, {tests!r})
from test_sequence_fingerprint import varied_items
from datareel.sources.sequence import content_digest
print(content_digest(varied_items(), 13))
"""


@pytest.mark.slow
def test_the_digest_is_the_same_in_another_process_with_another_hash_seed():
    here = content_digest(varied_items(), 13)
    for seed in ("12345",):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(tests=str(__import__("pathlib").Path(__file__).parent))],
            capture_output=True,
            text=True,
            timeout=120,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        assert out.stdout.strip() == here


def test_a_hugging_face_dataset_is_fingerprinted_by_its_rows():
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(50)], "n": list(range(50))})
    state = saved_state(rows)
    loader_on(datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(50)], "n": list(range(50))})).load_state_dict(
        state
    )
    other = datasets.Dataset.from_dict({"text": [f"u{i}" for i in range(50)], "n": list(range(50))})
    with pytest.raises(StateMismatchError):
        loader_on(other).load_state_dict(state)


class Augmenting:
    """A map-style dataset whose items are random on every read (augmentation in __getitem__)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return {"id": i, "noise": torch.rand(2)}


def test_a_sequence_that_reads_differently_twice_is_recorded_without_content_with_a_warning(caplog):
    with caplog.at_level("WARNING", logger="datareel"):
        state = saved_state(Augmenting())
    assert "content" not in state["spec"]["dataset"]
    assert "read twice gave two different items" in caplog.text and "fingerprint=" in caplog.text
    loader_on(Augmenting()).load_state_dict(state)  # name and length only, as before


class Broken:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 9:
            raise KeyError(i)
        return i


def test_an_item_that_fails_to_read_does_not_break_the_fingerprint():
    assert content_digest(Broken(), 10) is not None


def test_a_named_fingerprint_replaces_sampling_and_false_records_name_and_length_only():
    v1 = saved_state(ITEMS, fingerprint="v1")
    loader_on([{"other": True}] * 100, fingerprint="v1").load_state_dict(v1)  # the user named the content
    with pytest.raises(StateMismatchError):
        loader_on(ITEMS, fingerprint="v2").load_state_dict(v1)
    off = saved_state(ITEMS, fingerprint=False)
    assert "content" not in off["spec"]["dataset"]
    for bad in ("", 1, None):
        with pytest.raises(OptionError, match="fingerprint="):
            datareel.from_sequence(ITEMS, fingerprint=bad)


def test_a_blend_of_sequences_refuses_other_content_in_one_child_and_the_state_stays_small():
    def blend(b_items):
        a = datareel.from_sequence(ITEMS, name="a")
        b = datareel.from_sequence(b_items, name="b")
        return datareel.Loader(
            datareel.mix([(a, 0.5), (datareel.mix_epochized([(b, 1)]), 0.5)]),
            global_batch_size=4,
            micro_batch_size=4,
        )

    def b_items(sign):
        return [{"id": sign * i, "text": "b"} for i in range(30)]

    loader = blend(b_items(1))
    next(iter(loader))
    state = loader.state_dict()
    assert len(json.dumps(state)) < 1024
    blend(b_items(1)).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="content"):
        blend(b_items(-1)).load_state_dict(state)


def test_the_digest_is_read_once_per_source():
    reads = []

    class Counting(list):
        def __getitem__(self, i):
            reads.append(i)
            return super().__getitem__(i)

    source = datareel.from_sequence(Counting(range(100)), name="c")
    source.fingerprint()
    source.fingerprint()
    assert len(reads) == SAMPLED + 1  # the first item twice (the determinism check)
