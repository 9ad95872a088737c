"""A packed loader restored with another task encoder class, beside megatron.energon 7.4.1.

Energon's suite restores a packing loader's state into a loader of another encoder class that plans alike
(``test_aux_random_access_with_cache``).  The facade accepts it where the state lies at a window's start of
the windowed stage (nothing of the window handed out), on any worker count, with encoders derived from
either library's ``DefaultTaskEncoder``; inside a window it refuses, naming the window, since it cannot
tell whether the new class plans the units already handed out as the old one did (Energon does not check).
"""

from __future__ import annotations

import pytest

import datareel
from datareel import energon as den

me = pytest.importorskip("megatron.energon")
pytestmark = pytest.mark.workers  # the facade plans packs in a planning process


class _Singles:
    """Every sample a pack of its own; a pack's text is its samples' keys, a batch its packs' texts."""

    def select_samples_to_pack(self, samples):
        return [[s] for s in samples]

    def pack_selected_samples(self, samples):
        return type(samples[0]).derive_from(samples[0], text="+".join(s.__key__ for s in samples))

    def batch(self, samples):
        return [s.text for s in samples]


class OursSaved(_Singles, den.DefaultTaskEncoder):
    pass


class OursRestored(_Singles, den.DefaultTaskEncoder):
    pass


class TheirsSaved(_Singles, me.DefaultTaskEncoder):
    pass


class TheirsRestored(_Singles, me.DefaultTaskEncoder):
    pass


class OursPairs(OursSaved):
    """Plans otherwise: packs of two."""

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]


def _loader(lib, root, encoder, workers, buffer, repeat=True):
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    dataset = lib.get_train_dataset(
        root,
        batch_size=2,
        worker_config=config,
        task_encoder=encoder,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        packing_buffer_size=buffer,
        repeat=repeat,
    )
    return lib.get_savable_loader(dataset, watchdog_timeout_seconds=None)


def _continues(lib, root, saved, restored, workers):
    first = _loader(lib, root, saved(), workers[0], 2)  # windows of 2 inputs, 2 packs each: one per batch
    it = iter(first)
    for _ in range(7):
        next(it)
    state = first.save_state_rank()
    after = [next(it) for _ in range(12)]
    again = _loader(lib, root, restored(), workers[1], 2)
    again.restore_state_rank(state)
    assert [batch for _, batch in zip(range(12), again)] == after
    assert len({text for batch in after for text in batch}) == 24
    for loader in (first, again):
        getattr(loader, "close", lambda: None)()


def test_energon_continues_with_another_class_that_plans_alike(texts):
    _continues(me, texts, TheirsSaved, TheirsRestored, (0, 0))


@pytest.mark.parametrize(
    "saved, restored", [(OursSaved, OursRestored), (TheirsSaved, TheirsRestored), (TheirsSaved, OursRestored)]
)
def test_the_facade_continues_with_another_class_at_a_window_start(texts, saved, restored):
    _continues(den, texts, saved, restored, (0, 0))


def test_the_facade_continues_with_another_class_on_another_worker_count(texts):
    _continues(den, texts, TheirsSaved, OursRestored, (2, 0))


def test_the_facade_refuses_another_class_inside_a_window_and_names_it(texts):
    first = _loader(den, texts, OursSaved(), 0, 3)  # windows of 3 packs: one batch of 2 stops inside one
    it = iter(first)
    next(it)
    state = first.save_state_rank()
    again = _loader(den, texts, TheirsRestored(), 0, 3)
    with pytest.raises(datareel.StateMismatchError) as refused:
        again.restore_state_rank(state)
    message = str(refused.value)
    assert "inside window 0" in message and "OursSaved" in message and "TheirsRestored" in message
    same = _loader(den, texts, OursSaved(), 0, 3)
    same.restore_state_rank(state)
    assert next(iter(same)) == next(it)


@pytest.mark.parametrize("saved, restored", [(OursSaved, OursPairs), (OursPairs, OursSaved)])
def test_a_finite_pass_restored_with_a_class_that_packs_otherwise_serves_every_sample_once(texts, saved, restored):
    first = _loader(den, texts, saved(), 0, 2, repeat=False)
    it = iter(first)
    before = [next(it) for _ in range(5)]  # 10 packs, each window's whole (a window of 2 samples: 2 or 1 packs)
    state = first.save_state_rank()
    again = _loader(den, texts, restored(), 0, 2, repeat=False)
    again.restore_state_rank(state)
    after = list(again)  # to the pass's end, restore keys stamped on the way
    keys = [key for batch in before + after for text in batch for key in text.split("+")]
    assert sorted(keys) == sorted(f"t{s}-{i:03d}" for s in range(3) for i in range(30))
    assert ("+" in after[0][0]) == (restored is OursPairs)
    again.close()
