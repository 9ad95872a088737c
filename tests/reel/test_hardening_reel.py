"""The end of a one-pass reel (issue 12, first part): a finished loader yields nothing more on every rank
and its state restores. (Split by layer from test_hardening.py.)"""

from __future__ import annotations

import datareel


def test_a_finished_one_pass_loader_yields_nothing_more_on_every_rank_and_its_state_restores():
    for world in (1, 2):
        ranks = [
            datareel.Loader(range(7), global_batch_size=4, micro_batch_size=2, world_size=world, rank=r,
                            repeat=False, shuffle=False)
            for r in range(world)
        ]  # fmt: skip
        first = [[b.tolist() for b in loader] for loader in ranks]
        assert sorted(x for batches in first for b in batches for x in b) == list(range(7))
        for loader in ranks:
            assert [b for b in loader] == [] and len(loader) == 0 and loader.cursor == 7
            again = datareel.Loader(
                range(7), global_batch_size=4, micro_batch_size=2, world_size=world, rank=loader.rank,
                repeat=False, shuffle=False,
            )  # fmt: skip
            again.load_state_dict(loader.state_dict())
            assert list(again) == [] and len(again) == 0
