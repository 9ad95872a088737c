"""Hostile arguments to the plan (issue 12, first part): an impossible layout, a seed or cursor beyond 64
bits and a mix child rounding to zero samples are refused at once, by name. (Split by layer from
test_hardening.py.)"""

from __future__ import annotations

import pytest

import datareel
from datareel.errors import OptionError, TopologyError
from hangs import must_return
from state_edit import edited


def test_an_impossible_layout_with_a_huge_global_batch_is_refused_at_once():
    with must_return(), pytest.raises(TopologyError, match=r"values that work with world_size=1: 1, 2, 4, .*\.\.\."):
        datareel.Loader(range(10), global_batch_size=10**12, micro_batch_size=7)


def test_a_seed_or_cursor_beyond_64_bits_is_refused_naming_the_field():
    with pytest.raises(OptionError, match=r"seed=18446744073709551616 must be an integer >= 0 and at most"):
        datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, seed=1 << 64)
    loader = datareel.Loader(range(10), global_batch_size=2, micro_batch_size=2, seed=(1 << 64) - 1)
    assert next(iter(loader)) is not None
    state = loader.state_dict()
    for cursor in (1 << 63, -2):
        with pytest.raises(
            datareel.DatareelError, match=rf"state cursor={cursor} must be an integer in \[0, 2\^63 - 1\]"
        ):
            loader.load_state_dict(edited(state, cursor=cursor))


def test_a_mix_epochized_child_rounding_to_zero_samples_is_refused_by_name():
    big, tiny = datareel.from_sequence(range(100), name="big"), datareel.from_sequence(range(3), name="tiny")
    with pytest.raises(OptionError, match=r"children \['tiny'\] round to 0 samples per meta-epoch"):
        datareel.mix_epochized([(big, 1.0), (tiny, 0.1)])
    assert len(datareel.Loader(datareel.mix_epochized([(big, 1.0), (tiny, 0.2)]), global_batch_size=1,
                               micro_batch_size=1, repeat=False)) == 101  # fmt: skip
