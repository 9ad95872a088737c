"""``batch_size=None`` through the facade, beside megatron.energon 7.4.1: samples one by one, with
Energon's hooks (cookers, preencode/encode/postencode, online packing), never ``batch`` or
``encode_batch``, and ``self`` the user's encoder under ``@stateless(restore_seeds=True)``."""

from __future__ import annotations

import warnings

import pytest

from datareel import energon as den
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import build_shards

me = pytest.importorskip("megatron.energon")

CALLS: list[str] = []  # hook names, in the order they ran (worker-less loaders: this process)


@pytest.fixture(scope="module")
def crude(tmp_path_factory):
    root = tmp_path_factory.mktemp("crude")
    build_shards(root, shard_sizes=(6, 5), long_names=False)  # 11 crude samples (txt, json, png, npy parts)
    prepare_webdataset(root, progress=False)
    return root


def encoders(lib):
    """The same three task encoders, written against ``lib``."""

    def cook(crude):
        CALLS.append("cook")
        return lib.TextSample(**lib.basic_sample_keys(crude), text="cooked " + crude["txt"])

    class Base(lib.DefaultTaskEncoder):
        cookers = [lib.Cooker(lib.stateless(cook))]
        tag = "mine"

        def batch(self, samples):
            CALLS.append("batch")
            return samples

        def encode_batch(self, batch):
            CALLS.append("encode_batch")
            return batch

    class Seeded(Base):
        @lib.stateless(restore_seeds=True)
        def encode_sample(self, sample):
            CALLS.append("encode_sample")
            return {"key": sample.__key__, "text": sample.text, "self": (type(self).__name__, self.tag)}

    class PrePost(Base):
        @lib.stateless(restore_seeds=True)
        def preencode_sample(self, sample):
            CALLS.append("preencode_sample")
            return {"key": sample.__key__, "self": type(self).__name__}

        @lib.stateless
        def postencode_sample(self, sample):
            CALLS.append("postencode_sample")
            return {**sample, "post": self.tag}

    class Packing(PrePost):
        @lib.stateless
        def select_samples_to_pack(self, samples):
            CALLS.append("select_samples_to_pack")
            return [samples[i : i + 2] for i in range(0, len(samples), 2)]

        @lib.stateless
        def pack_selected_samples(self, samples):
            CALLS.append("pack_selected_samples")
            return {"keys": [s["key"] for s in samples], "post": [s["post"] for s in samples]}

    return {"seeded": Seeded, "prepost": PrePost, "packing": Packing}


def read(lib, root, kind, *, train, workers=0):
    """One pass of a ``batch_size=None`` loader: (what it yields, the hooks that ran, in order)."""
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    extra = {"packing_buffer_size": 4} if kind == "packing" else {}
    CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if train:
            ds = lib.get_train_dataset(
                str(root), split_part="train", worker_config=config, batch_size=None, repeat=False,
                shuffle_buffer_size=None, max_samples_per_sequence=None, task_encoder=encoders(lib)[kind](), **extra,
            )  # fmt: skip
        else:
            ds = lib.get_val_dataset(
                str(root), split_part="train", worker_config=config, batch_size=None,
                task_encoder=encoders(lib)[kind](), **extra,
            )  # fmt: skip
        samples = list(lib.get_loader(ds))
    return samples, list(CALLS)


@pytest.mark.parametrize("kind", ["seeded", "prepost", pytest.param("packing", marks=pytest.mark.workers)])
def test_val_samples_and_hook_calls_match_energon(crude, kind):
    theirs, their_calls = read(me, crude, kind, train=False)
    ours, our_calls = read(den, crude, kind, train=False)
    assert ours == theirs
    if kind == "packing":  # datareel plans each window's packs ahead, in its planning process (not seen here)
        assert set(our_calls) <= set(their_calls) and set(their_calls) - set(our_calls) <= {"select_samples_to_pack"}
    else:  # cookers, then Energon's hooks in its order
        assert our_calls == their_calls
    assert "batch" not in their_calls and "encode_batch" not in their_calls and "cook" in their_calls


@pytest.mark.parametrize("kind", ["seeded", "prepost", pytest.param("packing", marks=pytest.mark.workers)])
def test_train_samples_and_hooks_match_energon(crude, kind):
    """A train pass (shuffled: the same samples, in another order)."""
    theirs, their_calls = read(me, crude, kind, train=True)
    ours, our_calls = read(den, crude, kind, train=True)
    if kind == "packing":  # packs of other neighbours: every sample once, in packs of the same sizes
        assert sorted(k for p in ours for k in p["keys"]) == sorted(k for p in theirs for k in p["keys"])
        assert sorted(len(p["keys"]) for p in ours) == sorted(len(p["keys"]) for p in theirs)
    else:
        assert sorted(map(repr, ours)) == sorted(map(repr, theirs))  # the pass as a multiset
    assert set(our_calls) <= set(their_calls) and set(their_calls) - set(our_calls) <= {"select_samples_to_pack"}
    assert "batch" not in their_calls and "cook" in our_calls


@pytest.mark.slow
def test_unbatched_in_worker_processes_gives_the_same_samples(crude):
    for kind in ("seeded", "prepost", "packing"):
        ours, _ = read(den, crude, kind, train=False, workers=2)
        theirs, _ = read(me, crude, kind, train=False, workers=2)
        if kind == "packing":  # Energon packs within each worker's slice; datareel within the rank's windows
            assert sorted(k for p in ours for k in p["keys"]) == sorted(k for p in theirs for k in p["keys"])
        else:
            assert ours == theirs


def test_online_packing_without_its_hooks_is_refused_for_the_true_reason(crude):
    class NoSelect(den.DefaultTaskEncoder):
        def pack_selected_samples(self, samples):
            return samples

    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = den.get_val_dataset(
        str(crude), split_part="train", worker_config=config, batch_size=None, task_encoder=NoSelect(),
        packing_buffer_size=4,
    )  # fmt: skip
    with pytest.raises(den.datasets.OptionError, match="select_samples_to_pack"):
        den.get_loader(ds)
