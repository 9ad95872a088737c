"""Calls a Megatron-style script makes, beside megatron.energon 7.4.1 on the same prepared data: what each returns
or raises must agree (sample order aside, which is datareel's own by design).

- a dict batch is the encoder's own (no ``__source__`` / ``__positions__`` added);
- a crude sample names its ``__shard__``;
- ``get_train_dataset(metadataset, subflavors=)`` puts them over the entries' own;
- ``restore_state_rank(None)`` starts afresh;
- ``Batch.from_samples`` keeps ``__sources__=()``;
- ``len()`` of a train loader counts one epoch of a dataset shuffled over ``k``, and whole batches with
  ``batch_drop_last``;
- ``WorkerConfig.active_worker_config`` and its runtime methods answer inside a task encoder's hook.
"""

from __future__ import annotations

import dataclasses

import pytest

from datareel import energon as den
from energon_text import prepare_text
from wds_helpers import write_shard

me = pytest.importorskip("megatron.energon")
LIBS = pytest.mark.parametrize("lib", [me, den], ids=["energon", "facade"])
N = 37


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity_calls")
    prepare_text(root / "text", "t", N, 10)
    from datareel.cli.prepare import prepare_webdataset

    write_shard(root / "crude" / "part-0.tar", [(f"c{i:03d}", {"txt": f"c {i}".encode()}) for i in range(6)])
    prepare_webdataset(root / "crude", split_ratio="1,0,0", progress=False)
    (root / "meta.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 1\n        path: crude\n        subflavors:\n          kind: crude\n          src: a\n"
    )
    return root


def _config(lib, workers=0):
    return lib.WorkerConfig(rank=0, world_size=1, num_workers=workers)


def _train(lib, path, batch_size, encoder=None, workers=0, **kwargs):
    dataset = lib.get_train_dataset(
        str(path),
        worker_config=_config(lib, workers),
        batch_size=batch_size,
        task_encoder=encoder if encoder is not None else lib.DefaultTaskEncoder(),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        **kwargs,
    )
    return dataset


def _cooking(lib, seen):
    @lib.stateless
    def cook(sample):
        seen.append(sample)
        return lib.TextSample(**lib.basic_sample_keys(sample), text=sample["txt"])

    return type("Cooking", (lib.DefaultTaskEncoder,), {"cookers": [lib.Cooker(cook)]})()


@LIBS
def test_a_dict_batch_is_the_encoders_own(data, lib):
    class Dicts(lib.DefaultTaskEncoder):
        def encode_batch(self, batch):
            raw = dataclasses.asdict(batch)
            del raw["__subflavors__"]
            return raw

    batch = next(iter(lib.get_loader(_train(lib, data / "text", 4, Dicts()), watchdog_timeout_seconds=None)))
    assert sorted(batch) == ["__key__", "__restore_key__", "__sources__", "text"]


@LIBS
def test_a_crude_sample_names_its_shard_and_takes_the_outer_subflavors(data, lib):
    seen = []
    dataset = _train(lib, data / "meta.yaml", 2, _cooking(lib, seen), subflavors={"x": 1, "src": "outer"})
    batch = next(iter(lib.get_loader(dataset, watchdog_timeout_seconds=None)))
    assert seen[0]["__shard__"] == "part-0.tar"
    assert {"__key__", "__restore_key__", "__sources__", "__subflavors__", "__shard__", "txt"} <= set(seen[0])
    assert "__source__" not in seen[0]
    assert batch.__subflavors__[0] == {"kind": "crude", "src": "outer", "x": 1}


@LIBS
def test_restoring_none_starts_afresh(data, lib):
    loader = lib.get_savable_loader(_train(lib, data / "text", 4), watchdog_timeout_seconds=None)
    loader.restore_state_rank(None)
    assert len(next(iter(loader)).__key__) == 4


@LIBS
def test_a_batch_of_samples_with_empty_sources_keeps_them_empty(lib):
    samples = [lib.TextSample(__key__=f"k{i}", __restore_key__=(), __sources__=(), text="a") for i in range(2)]
    batch = lib.Batch.from_samples(samples)
    assert batch.__sources__ == ()


@pytest.mark.parametrize("kwargs", [{"shuffle_over_epochs_multiplier": 2}, {"batch_drop_last": True}, {}])
def test_len_of_a_train_loader_is_energons(data, kwargs):
    lengths = [
        len(lib.get_savable_loader(_train(lib, data / "text", 5, **kwargs), watchdog_timeout_seconds=None))
        for lib in (me, den)
    ]
    assert lengths[0] == lengths[1], (kwargs, lengths)


class _Seeds:
    def encode_sample(self, sample):
        config = type(self).config_class.active_worker_config
        sample.text = (config.rank_worker_id(), config.global_worker_id(), config.worker_seed(), config.should_log(0))
        return sample

    def batch(self, samples):
        return [s.text for s in samples]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.workers)])
def test_the_active_worker_config_answers_in_a_hook(data, workers):
    seen = {}
    for lib in (me, den):
        cls = type("Seeds", (_Seeds, lib.DefaultTaskEncoder), {"config_class": lib.WorkerConfig})
        globals()[f"Seeds_{lib.__name__.replace('.', '_')}"] = cls
        cls.__qualname__ = cls.__name__ = f"Seeds_{lib.__name__.replace('.', '_')}"
        loader = lib.get_loader(_train(lib, data / "text", 2, cls(), workers=workers), watchdog_timeout_seconds=None)
        it = iter(loader)
        seen[lib.__name__] = {tuple(value) for _ in range(6) for value in next(it)}
    assert seen["datareel.energon"] == seen["megatron.energon"]
