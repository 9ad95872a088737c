"""``shuffle_over_epochs_multiplier`` over the family, beside megatron.energon 7.4.1 (the reference).

Each value goes to both libraries' ``get_train_dataset`` (one worker config, in-process reading): what Energon
accepts, the facade accepts with the same meaning (the batches are those of the canonical int the value stands
for, in each library, and the canonical ints show their meaning: a permutation each epoch, each sample ``k``
times in ``k`` epochs, draws with replacement); what Energon refuses (an assertion, or a ``TypeError`` when it
first shuffles), the facade refuses up front with an :class:`~datareel.OptionError` naming the value, the rule
and the fix.  Before: ``1.0`` and numpy's ``True`` were taken as 1 without a word, ``-1.0`` was refused.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter

import numpy as np
import pytest

import datareel
from datareel import DatasetError, OptionError
from datareel import energon as den
from datareel.energon.dataset_config import get_dataset_from_config

me = pytest.importorskip("megatron.energon")

REFUSED = "refused"
SAMPLES, TAKE = 90, 180  # the texts fixture's samples; two epochs' worth of batches of one

FAMILY = [  # (value, what Energon makes of it: the int it stands for, or REFUSED)
    (True, 1),
    (False, REFUSED),
    (1.0, REFUSED),
    (2.0, REFUSED),
    (1.5, REFUSED),
    (-1.0, -1),
    (-1, -1),
    (0, REFUSED),
    (-2, REFUSED),
    (None, None),
    ("2", REFUSED),
    (np.int64(2), 2),
    (np.int32(1), 1),
    (np.int64(-1), -1),
    (np.int64(0), REFUSED),
    (np.float64(2.0), REFUSED),
    (np.bool_(True), REFUSED),
]


def keys(lib, root, multiplier):
    """The first :data:`TAKE` sample keys (batches of one) of ``lib``'s train loader, or the error."""

    class Keys(lib.DefaultTaskEncoder):
        def batch(self, samples):
            return [s.__key__ for s in samples]

        def encode_batch(self, batch):
            return batch

    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = lib.get_train_dataset(
                str(root),
                worker_config=config,
                batch_size=1,
                shuffle_buffer_size=None,
                max_samples_per_sequence=None,
                parallel_shard_iters=1,  # Energon reads in order (None) only with one shard iterator
                shuffle_over_epochs_multiplier=multiplier,
                task_encoder=Keys(),
            )
            return [batch[0] for _, batch in zip(range(TAKE), lib.get_loader(dataset))]
    except Exception as exc:  # the test compares what each library does
        return exc


def meaning(got, k):
    """What the canonical multiplier ``k`` means, on one library's keys."""
    counts = Counter(got)
    if k is None:
        assert got[:SAMPLES] == sorted(got[:SAMPLES]) and len(set(got[:SAMPLES])) == SAMPLES  # in order
    elif k == 1:
        assert len(set(got[:SAMPLES])) == SAMPLES and len(set(got[SAMPLES:])) == SAMPLES  # a permutation each epoch
    elif k == 2:
        assert set(counts.values()) == {2} and len(set(got[:SAMPLES])) < SAMPLES  # each twice in two epochs
    else:
        assert len(counts) < SAMPLES and max(counts.values()) > 2  # with replacement


@pytest.mark.parametrize("value,canonical", FAMILY, ids=[f"{type(v).__name__}-{v!r}" for v, _ in FAMILY])
def test_a_multiplier_means_what_it_means_to_megatron_energon(texts, value, canonical):
    theirs, ours = keys(me, texts, value), keys(den, texts, value)
    if canonical is REFUSED:
        assert isinstance(theirs, Exception), theirs[:5]  # the table is Energon's behaviour
        assert isinstance(ours, OptionError), ours if isinstance(ours, Exception) else ours[:5]
        message = str(ours)
        assert f"shuffle_over_epochs_multiplier={value!r}" in message and "get_train_dataset" in message
        assert "must be None (read in order), -1" in message and "integer k >= 1" in message  # the rule
        assert "; pass " in message  # the fix
        return
    assert not isinstance(theirs, Exception), theirs
    assert not isinstance(ours, Exception), ours
    assert theirs == keys(me, texts, canonical)  # what it stands for in Energon
    assert ours == keys(den, texts, canonical)  # and in the facade
    meaning(theirs, canonical)
    meaning(ours, canonical)


@pytest.mark.parametrize(
    "value,fix",
    [
        (1.0, "an int: shuffle_over_epochs_multiplier=1"),
        (2.0, "an int: shuffle_over_epochs_multiplier=2"),
        ("2", "an int, not a string: shuffle_over_epochs_multiplier=2"),
        (0, "shuffle_over_epochs_multiplier=1 (the default)"),
    ],
)
def test_a_refused_multiplier_names_its_fix(texts, value, fix):
    with pytest.raises(OptionError, match=r"; pass " + fix.replace("(", r"\(").replace(")", r"\)")):
        den.get_train_dataset(
            str(texts),
            worker_config=den.WorkerConfig(rank=0, world_size=1, num_workers=0),
            batch_size=1,
            shuffle_over_epochs_multiplier=value,
        )


def test_get_dataset_from_config_reads_shuffle_over_epochs_the_same_way(texts):
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    with pytest.raises(OptionError, match=r"get_dataset_from_config: shuffle_over_epochs=1.0 \(float\)"):
        get_dataset_from_config(str(texts), worker_config=config, shuffle_over_epochs=1.0)
    assert get_dataset_from_config(str(texts), worker_config=config, shuffle_over_epochs=True) is not None


YAML_FAMILY = [(True, 1), (2, 2), (-1, -1), (None, None), (1.0, REFUSED), (-1.0, REFUSED), ("2", REFUSED)]
YAML_FAMILY += [(0, REFUSED), (False, REFUSED)]  # Energon loads the metadataset, then its sample loader asserts


@pytest.mark.parametrize("value,canonical", YAML_FAMILY, ids=[f"{type(v).__name__}-{v!r}" for v, _ in YAML_FAMILY])
def test_a_metadataset_multiplier_means_what_it_means_to_megatron_energon(texts, tmp_path, value, canonical):
    """A metadataset YAML's value (Energon reads it as ``Optional[int]``: ``true`` is 1, every float refused) through
    the facade's ``load_dataset(...).get_datasets`` beside megatron.energon's own train loader of the YAML."""
    import yaml

    from datareel.energon.metadataset import load_dataset

    header = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}
    node = {"weight": 1, "path": str(texts), "shuffle_over_epochs_multiplier": value}
    path = tmp_path / "mds.yaml"
    path.write_text(yaml.safe_dump({**header, "splits": {"train": {"blend": [node]}}}))
    theirs = keys(me, path, 1)  # the argument multiplies the YAML's value: 1 leaves it
    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    try:
        ours = load_dataset(path).get_datasets(training=True, split_part="train", worker_config=config)
    except Exception as exc:  # the test compares what each library does
        ours = exc
    if canonical is REFUSED:
        assert isinstance(theirs, Exception), theirs[:5]
        assert isinstance(ours, DatasetError) and f"shuffle_over_epochs_multiplier={value!r}" in str(ours), ours
        return
    assert not isinstance(theirs, Exception), theirs
    assert not isinstance(ours, Exception), ours
    assert ours.datasets[0].dataset.shuffled == (canonical is not None)


@pytest.mark.parametrize("value,canonical", YAML_FAMILY, ids=[f"{type(v).__name__}-{v!r}" for v, _ in YAML_FAMILY])
def test_datareel_reads_a_metadataset_multiplier_as_the_facade_does(texts, tmp_path, value, canonical):
    """The builder behind ``get_train_dataset`` / ``open_dataset`` rides the same walk as the facade's
    ``get_datasets`` (tested beside megatron.energon above): it refuses what that refuses, naming the value, and
    reads an accepted value as its canonical one."""
    import yaml

    header = {"__module__": "megatron.energon", "__class__": "MetadatasetV2"}

    def opened(written, name):
        path = tmp_path / name
        node = {"weight": 1, "path": str(texts), "shuffle_over_epochs_multiplier": written}
        path.write_text(yaml.safe_dump({**header, "splits": {"train": {"blend": [node]}}}))
        return datareel.open_dataset(path)

    if canonical is REFUSED:
        with pytest.raises(DatasetError, match=rf"shuffle_over_epochs_multiplier={re.escape(repr(value))}"):
            opened(value, "mds.yaml")
        return
    assert opened(value, "mds.yaml").describe() == opened(canonical, "canonical.yaml").describe()
