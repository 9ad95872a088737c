"""The threaded map (``Loader(..., map_threads=n)``): the same batches, byte for byte, the same errors and
handler calls, the same order and states as without threads."""

from __future__ import annotations

import logging
import pickle
import random
import threading
import time

import numpy as np
import pytest
import torch

import datareel
from datareel import DatareelError, OptionError
from datareel.cli.prepare import prepare_webdataset
from datareel.energon import stateless
from datareel.execute.threads import ThreadMap
from wds_helpers import build_shards

THREADS = (0, 1, 4)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A prepared WebDataset of 17 samples (text, json, a png image, an npy array) in 4 shards."""
    root = tmp_path_factory.mktemp("threaded-wds")
    build_shards(root)
    prepare_webdataset(root, progress=False)
    return root


class Augment:
    """Per-sample randomness from numpy, torch and random, all through datareel's per-sample generators."""

    def encode_sample(self, sample):
        rng = datareel.sample_rng()
        py = random.Random(int(rng.integers(0, 2**63)))
        return {
            "image": sample["png"] * float(rng.random()),
            "noise": torch.rand(3, generator=datareel.sample_torch_generator()),
            "draw": py.random(),
            "key": sample["__key__"],
            "thread": threading.current_thread().name,
        }

    def batch(self, samples):
        return {
            "image": [s["image"] for s in samples],
            "noise": torch.stack([s["noise"] for s in samples]),
            "draw": [s["draw"] for s in samples],
            "key": [s["key"] for s in samples],
            "thread": [s["thread"] for s in samples],
        }


def exact(value):
    """``value`` as plain data with every tensor and array as (dtype, shape, bytes): equal means byte-equal."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.contiguous().numpy().tobytes())
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items() if k != "thread"}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return value


def batches(dataset, steps=6, **options):
    loader = datareel.Loader(dataset, global_batch_size=8, micro_batch_size=4, seed=5, **options)
    it = iter(loader)
    got = [next(it) for _ in range(steps)]
    loader.close()
    return got


@pytest.mark.parametrize("shuffle", [True, datareel.BlockShuffle(block=4)], ids=["full", "block"])
def test_same_batches_byte_for_byte_at_every_thread_count(images, shuffle):
    dataset = datareel.open_dataset(images)
    runs = {t: batches(dataset, task_encoder=Augment(), map_threads=t, shuffle=shuffle) for t in THREADS}
    assert all(pickle.dumps(exact(runs[t])) == pickle.dumps(exact(runs[0])) for t in THREADS)
    assert {name for b in runs[4] for name in b["thread"]} <= {f"datareel-map_{j}" for j in range(4)}
    assert {name for b in runs[0] for name in b["thread"]} == {threading.current_thread().name}


@pytest.mark.workers
def test_same_batches_in_dataloader_workers(images):
    serial = exact(batches(datareel.open_dataset(images), task_encoder=Augment()))
    for t in THREADS:
        got = batches(datareel.open_dataset(images), task_encoder=Augment(), map_threads=t, num_workers=2)
        assert exact(got) == serial
        if t:
            assert all(name.startswith("datareel-map") for b in got for name in b["thread"])


class Uneven:
    """Samples of very different cost: every third sleeps, so later samples finish first in other threads."""

    def encode_sample(self, sample):
        if sample % 3 == 0:
            time.sleep(0.02)
        return sample


def test_order_kept_with_samples_of_very_different_cost():
    data = list(range(48))
    runs = {t: batches(data, steps=8, task_encoder=Uneven(), map_threads=t) for t in THREADS}
    assert all([b.tolist() for b in runs[t]] == [b.tolist() for b in runs[0]] for t in THREADS)


class Flaky:
    """Sample 7 fails to read; 19 and 23 fail in encode_sample."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 7:
            raise OSError("disk hiccup")
        return {"__key__": f"doc-{i:03d}", "id": i}


class Failing:
    def encode_sample(self, sample):
        if sample["id"] in (19, 23):
            raise ValueError(f"cannot tokenize {sample['id']}")
        return {"id": sample["id"], "noise": int(datareel.sample_rng().integers(0, 10**6))}

    def batch(self, samples):
        return {"id": [s["id"] for s in samples], "noise": [s["noise"] for s in samples]}


def flaky_loader(threads, handler=None, **options):
    return datareel.Loader(
        datareel.from_sequence(Flaky(), name="flaky"), global_batch_size=40, micro_batch_size=20, shuffle=False,
        task_encoder=Failing(), map_threads=threads, error_handler=handler, **options,
    )  # fmt: skip


def test_substitute_and_handler_calls_as_without_threads(caplog):
    def run(threads):
        calls = []
        record = lambda exc, key: calls.append((type(exc).__name__, str(exc), key))  # noqa: E731
        loader = flaky_loader(threads, record, on_error="substitute")
        with caplog.at_level(logging.WARNING, logger="datareel"):
            caplog.clear()
            it = iter(loader)
            out = [next(it), next(it)]
            warnings = [r.getMessage() for r in caplog.records]
        return exact(out), calls, warnings

    serial = run(0)
    assert serial[1] == [
        ("OSError", "disk hiccup", "?"),
        ("ValueError", "cannot tokenize 19", "doc-019"),
        ("ValueError", "cannot tokenize 23", "doc-023"),
    ]
    for threads in (1, 4):
        assert run(threads) == serial


def test_substitute_without_handler_as_without_threads():
    def run(threads):
        it = iter(flaky_loader(threads, on_error="substitute"))
        return exact([next(it), next(it)])

    assert run(4) == run(0)


def test_raise_gives_the_same_error_and_cause():
    def failure(threads, handler=None):
        calls = []
        loader = flaky_loader(threads, handler and (lambda exc, key: calls.append(key)))
        with pytest.raises(DatareelError) as err:
            next(iter(loader))
        cause = err.value.__cause__
        return type(err.value), str(err.value), type(cause), str(cause), calls

    assert failure(4) == failure(0)
    assert failure(4, handler=True) == failure(0, handler=True)
    assert failure(0, handler=True)[-1] == ["?"]  # told of the first failure only, which raises


def test_a_raising_handler_stops_with_its_own_exception():
    class Stop(Exception):
        pass

    def handler(exc, key):
        raise Stop(f"stop at {key}")

    for threads in (0, 4):
        with pytest.raises(Stop, match="stop at "):
            next(iter(flaky_loader(threads, handler)))


def test_restore_with_another_thread_count(images):
    dataset = datareel.open_dataset(images)
    whole = exact(batches(dataset, steps=8, task_encoder=Augment()))
    for before, after in ((0, 4), (4, 0), (1, 2)):
        loader = datareel.Loader(
            dataset, global_batch_size=8, micro_batch_size=4, seed=5, task_encoder=Augment(), map_threads=before
        )
        it = iter(loader)
        head = [next(it) for _ in range(3)]
        state = loader.state_dict()
        assert "map_threads" not in repr(state)
        again = datareel.Loader(
            dataset, global_batch_size=8, micro_batch_size=4, seed=5, task_encoder=Augment(), map_threads=after
        )
        again.load_state_dict(state)
        rest = iter(again)
        assert exact(head + [next(rest) for _ in range(5)]) == whole


class Splitter:
    """A generator encoder (the windowed stage): 0, 1 or 2 outputs per input, with per-sample randomness."""

    def encode_sample(self, sample):
        for j in range(sample % 3):
            yield {"x": sample, "j": j, "noise": float(datareel.sample_rng().random())}

    def batch(self, samples):
        return [(s["x"], s["j"], s["noise"]) for s in samples]


class Pair:
    """Online packing: preencode + postencode, packs of two in each window."""

    def preencode_sample(self, sample):
        return {"x": sample, "pre": float(datareel.sample_rng().random())}

    def postencode_sample(self, sample):
        return {**sample, "post": float(datareel.sample_rng().random())}

    def select_samples_to_pack(self, samples):
        return [samples[k : k + 2] for k in range(0, len(samples) - 1, 2)]

    def pack_selected_samples(self, samples):
        return [(s["x"], s["pre"], s["post"]) for s in samples]

    def batch(self, packs):
        return packs


@pytest.mark.parametrize(
    "encoder, stage",
    [(Splitter, datareel.WindowedStage(window=16, background=False)),
     (Pair, datareel.WindowedStage(window=16, pack=True, background=False)),
     pytest.param(Pair, datareel.WindowedStage(window=16, pack=True), marks=pytest.mark.workers, id="planner")],
)  # fmt: skip
def test_windowed_stage_same_as_without_threads(encoder, stage):
    runs = {t: batches(list(range(60)), steps=6, task_encoder=encoder(), stage=stage, map_threads=t) for t in THREADS}
    assert all(runs[t] == runs[0] for t in THREADS)


@pytest.mark.parametrize("value", [-1, 1.5, True, "2", 10**6])
def test_map_threads_is_checked(value):
    with pytest.raises(OptionError, match="map_threads"):
        datareel.Loader(list(range(8)), global_batch_size=4, micro_batch_size=4, map_threads=value)


def test_global_reseeding_is_refused_with_threads():
    with pytest.raises(OptionError, match="map_threads=2 with reseed_global_rng=True") as err:
        datareel.Loader(list(range(8)), global_batch_size=4, micro_batch_size=4, map_threads=2, reseed_global_rng=True)
    assert "sample_rng" in str(err.value) and "map_threads=0" in str(err.value)

    class Reseeding:
        @stateless(restore_seeds=True)
        def encode_sample(self, sample):
            return sample

    with pytest.raises(OptionError, match="encode_sample marked @stateless"):
        datareel.Loader(
            list(range(8)), global_batch_size=4, micro_batch_size=4, map_threads=2, task_encoder=Reseeding()
        )
    datareel.Loader(list(range(8)), global_batch_size=4, micro_batch_size=4, task_encoder=Reseeding())  # no threads


def test_reads_from_many_threads_at_once_are_the_serial_reads(images):
    serial = datareel.open_dataset(images)
    expected = [exact(dict(serial.read(i))) for i in range(len(serial))]
    for _ in range(3):
        fresh = datareel.open_dataset(images)  # first use of its shards from the threads
        outcomes = ThreadMap(8).map(lambda i, f=fresh: exact(dict(f.read(i))), list(range(len(fresh))) * 4)
        assert [o.get() for o in outcomes] == expected * 4


def test_thread_map_bounds_in_flight_and_keeps_order():
    running, most = [0], [0]
    lock = threading.Lock()

    def work(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.001 * (i % 4))
        with lock:
            running[0] -= 1
        if i == 5:
            raise KeyError(i)
        return i * i

    outcomes = ThreadMap(3).map(work, list(range(40)))
    assert [o.value for o in outcomes if o.error is None] == [i * i for i in range(40) if i != 5]
    assert isinstance(outcomes[5].error, KeyError) and most[0] <= 3
    pickle.loads(pickle.dumps(ThreadMap(3)))  # the pool is never sent


def test_a_dataset_in_a_bucket_gives_the_same_batches_with_threads(images):
    """Samples of a source in a bucket are fetched together by the calling thread and decoded by the threads."""
    pytest.importorskip("moto")
    from s3_server import make_bucket, s3_server, upload

    with s3_server():
        make_bucket("threads")
        upload(images, "s3://threads/wds")
        runs = [exact(batches(datareel.open_dataset("s3://threads/wds"), task_encoder=Augment(), map_threads=t))
                for t in THREADS]  # fmt: skip
    assert runs[1] == runs[0] and runs[2] == runs[0]


class SplitterFailing(Splitter):
    def encode_sample(self, sample):
        if sample in (5, 11, 12):
            raise ValueError(f"bad input {sample}")
        yield from super().encode_sample(sample)


def test_windowed_stage_failures_reach_the_handler_in_the_same_order():
    def run(threads):
        calls = []
        got = batches(
            list(range(60)), steps=6, task_encoder=SplitterFailing(), map_threads=threads, on_error="substitute",
            stage=datareel.WindowedStage(window=16, background=False),
            error_handler=lambda exc, key: calls.append((str(exc), key)),
        )  # fmt: skip
        return got, calls

    serial = run(0)
    assert len(serial[1]) >= 2 and all(message == f"bad input {key}" for message, key in serial[1])
    assert run(4) == serial and run(1) == serial
