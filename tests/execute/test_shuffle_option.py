"""``Loader(shuffle=)`` takes ``True``, ``False`` (a numpy bool too) or a ``BlockShuffle`` instance, and refuses
everything else by name (issue 36 item 6): before, any value was read by its truth value, so the class
``datareel.BlockShuffle`` (parentheses forgotten), ``"block"``, ``16``, ``1.0`` or ``"False"`` silently became
the full shuffle, and ``None`` or ``0`` the reel in order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel.errors import OptionError
from profiles import examples

KW = dict(global_batch_size=4, micro_batch_size=4, world_size=1, rank=0, seed=3)


class MyBlocks(datareel.BlockShuffle):
    """A user's subclass: an instance is a block shuffle, the class is not."""


def data():
    return datareel.from_sequence(list(range(64)), name="numbers")


def first(shuffle, n=4):
    loader = datareel.Loader(data(), shuffle=shuffle, **KW)
    return [b.tolist() for _, b in zip(range(n), loader)]


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (datareel.BlockShuffle, "BlockShuffle is the class: pass an instance, shuffle=datareel.BlockShuffle(block=16)"),
        (MyBlocks, "MyBlocks is the class: pass an instance"),
        ("block", "pass shuffle=datareel.BlockShuffle(block=16)"),
        ("Blocks", "pass shuffle=datareel.BlockShuffle(block=16)"),
        ("True", "pass shuffle=True, shuffle=False or shuffle=datareel.BlockShuffle(block=16)"),
        ("", "pass shuffle=True, shuffle=False"),
        (16, "for blocks of 16 samples pass shuffle=datareel.BlockShuffle(block=16)"),
        (np.int64(8), "for blocks of 8 samples pass shuffle=datareel.BlockShuffle(block=8)"),
        (1, "pass shuffle=True"),
        (0, "pass shuffle=False"),
        (-1, "pass shuffle=True, shuffle=False"),
        (1.0, "pass shuffle=True, shuffle=False"),
        (0.0, "pass shuffle=True, shuffle=False"),
        (None, "pass shuffle=False to read in order, or shuffle=True for the full shuffle"),
        ([True], "pass shuffle=True, shuffle=False"),
        ({"block": 16}, "pass shuffle=True, shuffle=False"),
        (np.array([True]), "pass shuffle=True, shuffle=False"),
    ],
    ids=repr,
)
def test_a_shuffle_that_is_not_a_flag_or_a_block_shuffle_is_refused_by_name(value, fix):
    with pytest.raises(OptionError) as info:
        datareel.Loader(data(), shuffle=value, **KW)
    message = str(info.value)
    assert message.startswith(f"shuffle={value!r}: "), message  # the value
    assert "takes True (the full shuffle), False (the reel in order) or a BlockShuffle instance" in message  # rule
    assert fix in message  # the fix


@settings(max_examples=examples(0.3))
@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.floats(allow_nan=True),
        st.text(max_size=8),
        st.binary(max_size=4),
        st.lists(st.booleans(), max_size=2),
        st.sampled_from([datareel.BlockShuffle, MyBlocks, object(), type, np.float32(1)]),
    )
)
def test_nothing_but_a_flag_or_a_block_shuffle_instance_is_accepted(value):
    with pytest.raises(OptionError, match=r"^shuffle="):
        datareel.Loader(data(), shuffle=value, **KW)


@pytest.mark.parametrize(
    ("value", "same_as"),
    [(True, True), (False, False), (np.bool_(True), True), (np.bool_(False), False)],
    ids=["True", "False", "np.True_", "np.False_"],
)
def test_the_flags_are_accepted_numpy_bools_as_the_bool_they_hold(value, same_as):
    loader = datareel.Loader(data(), shuffle=value, **KW)
    assert loader.shuffle is same_as  # a plain bool: the saved spec's "shuffle" stays JSON
    assert loader.state_dict()["spec"]["shuffle"] is same_as
    assert first(value) == first(same_as)


def test_a_block_shuffle_instance_is_accepted_a_subclass_too():
    blocks = first(datareel.BlockShuffle(block=4))
    assert blocks == first(MyBlocks(block=4))
    assert blocks != first(True) and blocks != first(False)  # its own order, not the full shuffle's
