"""The locality shuffle's read cost, from the plan alone (datareel.testing.locality): issue 28's targets on
simulated ranks (k = 16, m W dividing the period: <= 0.07 requests per sample, <= 1.1 bytes read per byte
used, every sample of a global batch from its own block), the full shuffle's one request per sample beside
it, a window cutting the next global batch's shared blocks, and a 1:1 mix keeping the saving."""

import numpy as np
import pytest

import datareel
from datareel.errors import OptionError
from datareel.testing.locality import read_profile

N = 1 << 15


def loader(data, W, m, G=256, **kw):
    return datareel.Loader(data, global_batch_size=G, micro_batch_size=m, world_size=W, rank=0, **kw)


@pytest.fixture(scope="module")
def data():
    return datareel.from_sequence(np.arange(N), name="x")


@pytest.mark.parametrize("W,m", [(1, 256), (2, 64), (4, 16), (8, 32), (8, 2)])
def test_block_shuffle_meets_the_read_targets_where_m_w_divides_the_period(data, W, m):
    blocked = read_profile(loader(data, W, m, shuffle=datareel.BlockShuffle(block=16)), N // 2, shard_size=1000)
    assert blocked.requests_per_sample <= 0.07 and blocked.read_per_used <= 1.1
    assert blocked.blocks_per_batch == 1.0  # every sample of a global batch from a different block
    full = read_profile(loader(data, W, m), N // 2, shard_size=1000)
    assert full.requests_per_sample == 1.0 and full.read_per_used == 1.0


def test_a_window_cuts_the_blocks_shared_with_the_next_global_batch(data):
    one = read_profile(loader(data, 4, 16, shuffle=datareel.BlockShuffle(block=16)), N // 2)
    four = read_profile(loader(data, 4, 16, shuffle=datareel.BlockShuffle(block=16, window=4)), N // 2)
    assert one.next_batch_same_block > 0.9 and four.next_batch_same_block < 0.3
    assert four.requests_per_sample == one.requests_per_sample == 1 / 16


def test_a_mix_with_shares_dividing_the_period_keeps_the_saving():
    a = datareel.from_sequence(np.arange(N), name="a")
    b = datareel.from_sequence(np.arange(N), name="b")
    mixed = read_profile(loader(datareel.mix([(a, 1), (b, 1)]), 4, 16, shuffle=datareel.BlockShuffle(block=16)), N // 2)
    assert mixed.requests_per_sample <= 0.07 and mixed.read_per_used <= 1.1


def test_separate_workers_without_a_shared_cache_each_fetch_their_part(data):
    L = loader(data, 2, 64, shuffle=datareel.BlockShuffle(block=16))  # 2 steps a global batch
    apart = read_profile(L, N // 2, per_worker=True, workers=2)
    assert apart.requests_per_sample == 1 / 16  # the step's parity fixes the worker: each block stays whole
    L = loader(data, 4, 64, shuffle=datareel.BlockShuffle(block=16))  # 1 step a global batch
    assert read_profile(L, N // 2, per_worker=True, workers=2).requests_per_sample == 2 / 16


def test_a_schedule_is_refused():
    a = datareel.from_sequence(np.arange(100), name="a")
    L = datareel.Loader(
        a, global_batch_size=datareel.RampUp(start=4, increment=4, ramp_samples=40, final=8), micro_batch_size=4
    )
    with pytest.raises(OptionError, match="constant global batch size"):
        read_profile(L, 50)
