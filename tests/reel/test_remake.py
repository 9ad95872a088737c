"""``Loader.remake``: every micro-batch a loader hands out is made again from its ``next_address()`` by a loader
of another world size and micro-batch size (the same global batch size), fresh or restored mid-way, for every
reel kind: plain, planned packing (``datareel.Packing``), a generator ``encode_sample`` and online packing
(the windowed stage).  A bad address is refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import OptionError, Packing, WindowedStage
from datareel.testing.rows import to_python
from encoders import Knapsack, Packer, Splitter
from profiles import examples


def _docs(n):
    lengths = np.random.default_rng(n).integers(1, 9, n)
    return datareel.from_sequence([{"id": i, "len": int(k)} for i, k in enumerate(lengths)], name="docs")


class Plain:
    def encode_sample(self, sample):
        return {"id": sample["id"], "noise": int(datareel.sample_rng().integers(0, 1000))}

    def batch(self, samples):
        return {k: [s[k] for s in samples] for k in samples[0]}


def _lengths(source, indices):
    """``length=`` of planned packing: each sample's ``len`` field."""
    return np.array([source.read(int(i))["len"] for i in indices], dtype=np.int64)


KINDS = {
    "plain": lambda window: dict(task_encoder=Plain()),
    "packing": lambda window: dict(
        task_encoder=Packer(), packing=Packing(max_length=12, length=_lengths, window=window)
    ),
    "generator": lambda window: dict(task_encoder=Splitter(), stage=WindowedStage(window=window, background=False)),
    "online": lambda window: dict(
        task_encoder=Knapsack(), stage=WindowedStage(window=window, pack=True, background=False)
    ),
}


def _loader(kind, window, n, G, m, W, rank, repeat):
    return datareel.Loader(
        _docs(n), global_batch_size=G, micro_batch_size=m, world_size=W, rank=rank, seed=5, repeat=repeat,
        **KINDS[kind](window),
    )  # fmt: skip


def _handed_out(loader, steps):
    out, it = [], iter(loader)
    for _ in range(steps):
        address = loader.next_address()
        try:
            out.append((address, next(it)))
        except StopIteration:
            break
    return out


@settings(max_examples=examples(0.5), deadline=None)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    W=st.integers(1, 3),
    W2=st.integers(1, 3),
    m=st.integers(1, 2),
    m2=st.integers(1, 2),
    n=st.integers(5, 40),
    window=st.integers(1, 9),
    steps=st.integers(1, 12),
    skip=st.integers(0, 4),
    repeat=st.booleans(),
)
def test_every_handed_out_batch_is_made_again_on_another_topology(kind, W, W2, m, m2, n, window, steps, skip, repeat):
    G = math.lcm(m * W, m2 * W2)
    other = _loader(kind, window, n, G, m2, W2, W2 - 1, repeat)
    for rank in range(W):
        before = _loader(kind, window, n, G, m, W, rank, repeat)
        for address, batch in _handed_out(before, steps):
            assert to_python(other.remake(address)) == to_python(batch)
    # restored mid-way on the other topology, it still makes the first loader's batches from their addresses
    first = _loader(kind, window, n, G, m, W, 0, repeat)
    handed = _handed_out(first, steps)
    mid = _loader(kind, window, n, G, m, W, 0, repeat)
    it = iter(mid)
    for _ in range(skip * (G // (m * W))):
        next(it, None)
    state = mid.state_dict()
    other.load_state_dict(state)
    for address, batch in handed:
        assert to_python(other.remake(address)) == to_python(batch)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_wrong_address_is_refused_by_name(kind):
    loader = _loader(kind, 4, 20, 2, 2, 1, 0, True)
    address = loader.next_address()
    next(iter(loader))
    windowed = address.point is not None
    assert windowed == (kind != "plain")
    wrong = datareel.remake.Address(address.step, address.start, address.stop, None if windowed else (0, 0))
    with pytest.raises(OptionError, match="window"):
        loader.remake(wrong)
    with pytest.raises(OptionError, match="name no units"):
        datareel.remake.Address.from_key((3, 3), 2)
    with pytest.raises(OptionError, match="not a micro-batch address"):
        datareel.remake.Address.from_key((0, 1, 2), 2)
