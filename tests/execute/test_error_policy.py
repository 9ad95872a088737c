"""Run-time failures: raise naming the sample, or substitute deterministically on every topology."""

from __future__ import annotations

import logging

import pytest

import datareel
from datareel import DatareelError
from datareel.cli.prepare import prepare_webdataset
from datareel.testing import Topology, check_restore_everywhere, to_python
from wds_helpers import write_shard

BAD = {7, 19}


class Flaky:
    """Sample 7 fails to read; sample 19 fails in encode_sample (see Encoder)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 7:
            raise OSError("disk hiccup")
        return {"__key__": f"doc-{i:03d}", "id": i}


class Encoder:
    def encode_sample(self, sample):
        if sample["id"] == 19:
            raise ValueError("cannot tokenize")
        return {"id": sample["id"], "noise": int(datareel.sample_rng().integers(0, 10**6))}

    def batch(self, samples):
        return {"id": [s["id"] for s in samples], "noise": [s["noise"] for s in samples]}


def flaky():
    return datareel.from_sequence(Flaky(), name="flaky")


def test_raise_names_key_source_and_position():
    loader = datareel.Loader(flaky(), global_batch_size=40, micro_batch_size=40, shuffle=False, task_encoder=Encoder())
    with pytest.raises(DatareelError) as err:
        next(iter(loader))
    text = str(err.value)
    assert "index 7" in text and "source 'flaky'" in text and "reel position 7" in text and "disk hiccup" in text


@pytest.mark.workers
def test_raise_in_a_worker_process_too():
    loader = datareel.Loader(
        flaky(), global_batch_size=40, micro_batch_size=40, shuffle=False, task_encoder=Encoder(), num_workers=1
    )
    with pytest.raises(DatareelError, match="reel position 7"):
        next(iter(loader))


@pytest.mark.workers
def test_substitute_is_deterministic_and_logged(caplog):
    def run(**kw):
        loader = datareel.Loader(
            flaky(),
            global_batch_size=40,
            micro_batch_size=40,
            seed=3,
            task_encoder=Encoder(),
            on_error="substitute",
            **kw,
        )
        return to_python(next(iter(loader)))

    with caplog.at_level(logging.WARNING, logger="datareel"):
        a = run()
    assert not (set(a["id"]) & BAD) and len(a["id"]) == 40
    assert "'doc-019'" in caplog.text and "cannot tokenize" in caplog.text and "substituted sample index" in caplog.text
    assert run(num_workers=2) == a


@pytest.mark.workers
@pytest.mark.parametrize(
    "before,after", [(Topology(4, 0, 2), Topology(2, 2, 2)), (Topology(1, 2, 4), Topology(8, 0, 1))]
)
def test_substitutes_are_the_same_on_every_topology_and_restore(before, after):
    report = check_restore_everywhere(
        flaky(),
        global_batch_size=8,
        before=before,
        after=after,
        global_batches=10,
        seed=5,
        task_encoder=Encoder(),
        on_error="substitute",
    )
    assert report["restored"] >= 10


@pytest.mark.workers
def test_a_sample_planted_to_fail_decoding(tmp_path):
    write_shard(tmp_path / "s.tar", [(f"k{i}", {"json": b'{"i": %d}' % i}) for i in range(12)])
    write_shard(
        tmp_path / "t.tar",
        [("k12", {"json": b"{not json"})] + [(f"k{i}", {"json": b'{"i": %d}' % i}) for i in range(13, 20)],
    )
    prepare_webdataset(tmp_path, progress=False)
    ds = datareel.open_dataset(tmp_path)

    def keys(world_size=1, num_workers=0):
        out = []  # global batch 0, assembled from every rank's first micro-batch
        for rank in range(world_size):
            loader = datareel.Loader(
                ds,
                global_batch_size=20,
                micro_batch_size=20 // world_size,
                seed=2,
                on_error="substitute",
                rank=rank,
                world_size=world_size,
                num_workers=num_workers,
            )
            out += next(iter(loader))["__key__"]
        return out

    one = keys()
    assert "k12" not in one and len(one) == 20
    assert keys(world_size=4, num_workers=2) == one and keys(world_size=2) == one
    raising = datareel.Loader(ds, global_batch_size=20, micro_batch_size=20, seed=2)
    with pytest.raises(DatareelError, match=r"key 'k12'.*cannot decode part 'json'"):
        next(iter(raising))


def test_on_error_value_is_checked():
    with pytest.raises(ValueError, match="on_error='skip'"):
        datareel.Loader(flaky(), global_batch_size=1, micro_batch_size=1, on_error="skip")


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.workers)])
def test_a_failed_micro_batch_that_the_caller_skips_counts_as_consumed(workers):
    class FailsOnTwo:
        def encode_sample(self, sample):
            if sample["id"] == 2:
                raise ValueError("bad sample")
            return sample

    data = datareel.from_sequence([{"id": i} for i in range(6)], name="ids")
    loader = datareel.Loader(
        data,
        global_batch_size=1,
        micro_batch_size=1,
        shuffle=False,
        num_workers=workers,
        task_encoder=FailsOnTwo(),
        repeat=False,
    )
    it, seen, cursors = iter(loader), [], []
    while True:
        try:
            batch = next(it)
        except datareel.BatchError as exc:
            assert "'ids'" in str(exc) and "reel position 2" in str(exc)
            seen.append("error")
        except StopIteration:
            break
        else:
            seen.append(int(batch["id"][0]))
        cursors.append(loader.cursor)
    assert seen == [0, 1, "error", 3, 4, 5]
    assert cursors == [1, 2, 3, 4, 5, 6]  # the state never lags: a checkpoint would not replay the failed step


def test_a_failing_batch_hook_is_a_batch_error_naming_the_step():
    class BadBatch:
        def batch(self, samples):
            raise KeyError("no such column")

    loader = datareel.Loader(
        datareel.from_sequence([{"id": 1}] * 4, name="ids"),
        global_batch_size=2,
        micro_batch_size=2,
        task_encoder=BadBatch(),
    )
    with pytest.raises(datareel.BatchError, match=r"micro-step 0 \(reel positions 0\.\.1\) failed: KeyError"):
        next(iter(loader))
    assert loader.cursor == 2
