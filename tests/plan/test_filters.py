"""Static filters: a mapped subset fixed before permutation, computed once, part of the fingerprint."""

from __future__ import annotations

import numpy as np
import pytest

import datareel
from datareel import DatareelError, StateMismatchError
from datareel.testing import Topology, check_restore_everywhere


def docs(n=60):
    items = [
        {"__key__": f"{'test' if i % 5 == 0 else 'train'}/{i:03d}", "id": i, "len": (i * 7) % 23} for i in range(n)
    ]
    table = np.array([d["len"] for d in items])
    return datareel.from_sequence(items, name="docs"), (lambda source, idx: table[idx])


def test_filter_by_length_and_key_keeps_order_and_counts():
    data, length = docs()
    calls = []

    def keep(meta):
        calls.append(meta.index)
        return meta.length <= 12 and not meta.key.startswith("test/")

    kept = datareel.filter(data, keep, length=length)
    expected = [i for i in range(60) if (i * 7) % 23 <= 12 and i % 5]
    assert len(kept) == len(expected) and [kept.read(j)["id"] for j in range(len(kept))] == expected
    assert calls == list(range(60))  # computed once, here
    loader = datareel.Loader(kept, global_batch_size=len(kept), micro_batch_size=len(kept), seed=1)
    assert sorted(next(iter(loader))["id"].tolist()) == expected
    assert calls == list(range(60))  # not again when loading


@pytest.mark.workers
def test_filtered_epochs_and_elastic_restore():
    data, length = docs()
    kept = datareel.filter(data, lambda m: m.length % 2 == 0, length=length)
    report = check_restore_everywhere(
        kept, global_batch_size=6, before=Topology(3, 0, 2), after=Topology(2, 2, 1), global_batches=12, seed=4
    )
    assert report["restored"] >= 12


def test_filter_result_is_in_the_fingerprint():
    data, length = docs()
    a = datareel.filter(data, lambda m: m.length < 10, length=length)
    b = datareel.filter(data, lambda m: m.length < 11, length=length)
    loader = datareel.Loader(a, global_batch_size=2, micro_batch_size=2)
    next(iter(loader))
    with pytest.raises(StateMismatchError, match="dataset"):
        datareel.Loader(b, global_batch_size=2, micro_batch_size=2).load_state_dict(loader.state_dict())


def test_filter_errors():
    data, _ = docs()
    with pytest.raises(DatareelError, match="keeps no sample"):
        datareel.filter(data, lambda m: False)
    with pytest.raises(DatareelError, match="asked for a length"):
        datareel.filter(data, lambda m: m.length > 3)
    with pytest.raises(DatareelError, match="filter each source before mixing"):
        datareel.filter(datareel.mix([(data, 1)]), lambda m: True)
