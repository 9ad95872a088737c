"""Growing the world through the facade: ranks without a state file adopt the others' before anything
can observe or save the loader (real gloo ranks).

Megatron saves ``save_state_rank()`` into one file per rank and restores only where a file exists,
so after 2 ranks grow to 4, ranks 2 and 3 restored nothing.  The facade agrees the restored states
in one collective at the first call that iterates, saves or reads the position (every rank makes
one); whichever call that is, every rank must then report the same cursor, global batch and
accumulation steps, and read the global batch that follows the saved one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import datareel
from datareel import energon as den
from datareel.testing import run_local

SCHEDULE = (8, 8, 80, 32)  # datareel.RampUp(start, increment, ramp_samples, final): G is 16 at global batch 4
SAVED_AT = 4  # global batches read by 2 ranks before they save
FIRST_CALLS = ("cursor", "accumulation_steps", "global_batch", "global_batch_size", "save", "global_batches", "iter")


class Keys:
    def batch(self, samples):
        return [s["__key__"] for s in samples]


def _loader(root, world=None, rank=None, micro=2):
    if world is None:
        config = den.WorkerConfig.default_worker_config(num_workers=0)
    else:
        config = den.WorkerConfig(rank=rank, world_size=world, num_workers=0)
    return den.get_savable_loader(
        den.get_train_dataset(
            root,
            worker_config=config,
            batch_size=micro,
            shuffle_buffer_size=100,
            max_samples_per_sequence=100,
            task_encoder=Keys(),
            global_batch_size=datareel.RampUp(*SCHEDULE),
        )
    )


def _position(loader):
    return [loader.cursor, loader.global_batch, loader.global_batch_size, loader.accumulation_steps]


def _first_call(loader, first):
    """``first`` as the loader's first call after the restore, then the position and the next global batch."""
    if first == "save":
        seen = {"saved_cursor": loader.save_state_rank()["cursor"]}
    elif first == "global_batches":
        group = next(loader.global_batches())
        seen = {"group": [group.index, group.accumulation_steps], "position": _position(loader)}
        seen["keys"] = [k for batch in group for k in batch]
    elif first == "iter":
        seen = {"keys": next(iter(loader))}
    else:
        seen = {first: getattr(loader, first)}
    seen.setdefault("position", _position(loader))
    if "keys" not in seen:
        it = iter(loader)
        seen["keys"] = [k for _ in range(loader.accumulation_steps) for k in next(it)]
    return seen


def _grow(rank, world, root, out, phase):
    out = Path(out)
    if phase == "save":
        loader = _loader(root)
        for group in loader.global_batches():
            for _batch in group:
                pass
            if group.index + 1 == SAVED_AT:
                break
        torch.save(loader.save_state_rank(), out / f"state-{rank}.pt")
        return
    report = {}
    for first in FIRST_CALLS:  # every rank makes the same calls: each loader's agreement pairs up
        loader = _loader(root)
        mine = out / f"state-{rank}.pt"
        if mine.exists():  # Megatron restores only where this rank's file exists
            loader.restore_state_rank(torch.load(mine, weights_only=False))
        report[first] = _first_call(loader, first)
        loader.close()
    (out / f"report-{rank}.json").write_text(json.dumps(report))


@pytest.mark.slow
def test_ranks_without_a_state_file_adopt_before_any_observation(texts, tmp_path):
    run_local(_grow, 2, str(texts), str(tmp_path), "save", timeout=240)
    run_local(_grow, 4, str(texts), str(tmp_path), "resume", timeout=240)
    reports = [json.loads((tmp_path / f"report-{r}.json").read_text()) for r in range(4)]

    reference = _loader(str(texts), world=1, rank=0, micro=8)  # one rank reading whole global batches
    it = iter(reference)
    batches = [next(it) for _ in range(SAVED_AT + 1)]  # G = 8 up to batch 3, then 16: two micro-steps of 8
    cursor, G = 4 * 8, reference.global_batch_size_at(SAVED_AT)
    assert G == 16 and reference.accumulation_steps_at(SAVED_AT) == 2
    following = batches[SAVED_AT] + next(it)  # global batch 4: positions [32, 48)

    for first in FIRST_CALLS:
        seen = [report[first] for report in reports]
        at = cursor + (2 * 4 if first == "iter" else 0)  # after the first micro-step: one more of 2 × 4 samples
        assert all(s["position"] == [at, SAVED_AT, G, G // (2 * 4)] for s in seen), (first, seen)
        if first == "save":
            assert [s["saved_cursor"] for s in seen] == [cursor] * 4
        elif first == "global_batches":
            assert [s["group"] for s in seen] == [[SAVED_AT, 2]] * 4
        elif first != "iter":
            assert all(s[first] == seen[0]["position"][_position_index(first)] for s in seen), (first, seen)
        # the ranks' micro-batches, micro-step by micro-step in rank order, are global batch 4's samples
        steps = len(seen[0]["keys"]) // 2
        got = [k for a in range(steps) for s in seen for k in s["keys"][2 * a : 2 * a + 2]]
        assert got == following[: len(got)] and len(got) == (8 if first == "iter" else 16), (first, got)


def _position_index(name):
    return ["cursor", "global_batch", "global_batch_size", "accumulation_steps"].index(name)
