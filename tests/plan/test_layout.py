"""The global-batch layout: micro_batch(b, a, r) = b·G + a·m·W + r·m + [0, m)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datareel import TopologyError
from datareel.plan.layout import Layout
from profiles import examples


@st.composite
def layouts(draw):
    W = draw(st.integers(1, 8))
    m = draw(st.integers(1, 8))
    A = draw(st.integers(1, 6))
    return Layout(global_batch_size=A * m * W, micro_batch_size=m, world_size=W)


@settings(max_examples=examples(2))
@given(layout=layouts(), b=st.integers(0, 10**9))
def test_formula_and_global_batch_is_a_block(layout, b):
    G, m, W, A = layout.global_batch_size, layout.micro_batch_size, layout.world_size, layout.accumulation_steps
    seen = []
    for a in range(A):
        for r in range(W):
            pos = layout.rank_positions(b * A + a, r)
            assert pos.tolist() == list(range(b * G + a * m * W + r * m, b * G + a * m * W + r * m + m))
            seen.extend(pos.tolist())
    assert seen == list(range(b * G, (b + 1) * G))


@settings(max_examples=examples(2))
@given(layout=layouts(), length=st.integers(1, 500))
def test_finite_reel_every_position_once_and_shares_balanced(layout, length):
    W, S = layout.world_size, layout.step_size
    seen = []
    for step in range(-(-length // S)):
        sizes = []
        for r in range(W):
            pos = layout.rank_positions(step, r, length)
            sizes.append(len(pos))
            seen.extend(pos.tolist())
        assert max(sizes) - min(sizes) <= 1 or min(sizes) == layout.micro_batch_size
        assert sizes == sorted(sizes, reverse=True)
    assert seen == list(range(length))


@pytest.mark.parametrize("G,m,W", [(64, 3, 1), (10, 2, 3), (8, 16, 1), (12, 5, 2)])
def test_indivisible_topology_names_the_values(G, m, W):
    with pytest.raises(TopologyError) as err:
        Layout(global_batch_size=G, micro_batch_size=m, world_size=W)
    message = str(err.value)
    assert f"global_batch_size={G}" in message and f"micro_batch_size={m}" in message and f"world_size={W}" in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("field", ["global_batch_size", "micro_batch_size", "world_size"])
@pytest.mark.parametrize("bad", [0, -4, 2.0, True, "8"])
def test_non_positive_or_non_integer_values_refused(field, bad):
    kwargs = dict(global_batch_size=8, micro_batch_size=2, world_size=2)
    kwargs[field] = bad
    with pytest.raises(TopologyError, match=field):
        Layout(**kwargs)


def test_cursor_check_mid_global_batch():
    layout = Layout(global_batch_size=24, micro_batch_size=2, world_size=3)  # S = 6
    layout.check_cursor(24 * 7 + 12)  # 12 into the batch: fine
    with pytest.raises(TopologyError) as err:
        layout.check_cursor(24 * 7 + 8)  # 8 into the batch: 6 does not divide 8
    assert "176" in str(err.value) and "[1, 2, 4, 8]" in str(err.value)


def test_positions_dtype():
    pos = Layout(global_batch_size=4, micro_batch_size=2, world_size=2).rank_positions(10**12, 1)
    assert pos.dtype == np.int64 and pos.tolist() == [4 * 10**12 + 2, 4 * 10**12 + 3]


@settings(max_examples=examples(3))
@given(W=st.integers(1, 5), m=st.integers(1, 4), A=st.integers(1, 3), length=st.integers(1, 200), data=st.data())
def test_rank_steps_counts_the_non_empty_spans(W, m, A, length, data):
    layout = Layout(global_batch_size=m * W * A, micro_batch_size=m, world_size=W)
    S = layout.step_size
    start = data.draw(st.sampled_from(sorted({*range(0, length, S), length})))
    for rank in range(W):
        spans = [layout.rank_span(s, rank, length) for s in range(-(-start // S), -(-length // S))]
        assert layout.rank_steps(rank, length, start) == sum(1 for a, b in spans if a < b)
