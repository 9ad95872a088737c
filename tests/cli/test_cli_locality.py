"""`datareel inspect` and `datareel verify` on a state of the block shuffle: inspect names the block options;
verify rebuilds the loader with them (the period the state recorded) and lists the keys the job reads next."""

import datareel
from datareel.cli.inspect_state import describe_state, format_description
from datareel.cli.verify import verify_state


def data():
    return datareel.from_sequence([{"id": i, "__key__": f"k{i}"} for i in range(300)], name="ids")


def test_inspect_and_verify_a_block_shuffled_state():
    job = datareel.Loader(
        data(),
        global_batch_size=16,
        micro_batch_size=4,
        world_size=2,
        rank=0,
        seed=3,
        shuffle=datareel.BlockShuffle(block=4, window=2),
    )
    it = iter(job)
    for _ in range(3):
        next(it)
    state = job.state_dict()
    text = format_description(describe_state(state))
    assert "block shuffle (block 4, period 16, window 2)" in text
    verdict = verify_state(state, data(), world_size=4, micro_batch_size=2, show=1)
    assert verdict["ok"], verdict
    # the same keys the job itself reads next: its micro-batch (rank 0 of 2, m 4) is verify's ranks 0 and 1 (m 2)
    nxt = next(it)
    listed = verdict["next"][0]
    assert listed["global_batch"] == 1
    assert listed["ranks"][0] + listed["ranks"][1] == [f"k{i}" for i in nxt["id"].tolist()]
    # verify rebuilds the full shuffle from a state without locality
    full = datareel.Loader(data(), global_batch_size=16, micro_batch_size=4, seed=3)
    assert verify_state(full.state_dict(), data(), world_size=1, micro_batch_size=4, show=0)["ok"]
