"""datareel.energon's import surface behaves like Megatron-Energon 7.4.1's: names, default batching
(cross-checked against Energon's own functions), cookers, pre/post-encoding, SkipSample."""

from __future__ import annotations

import dataclasses

import megatron.energon as energon
import pytest
import torch

import datareel
import datareel.energon as den
from datareel.cli.prepare import prepare_webdataset
from datareel.energon.task_encoder.base import stateless
from datareel.energon.task_encoder.cooking import Cooker, basic_sample_keys
from wds_helpers import build_shards

MEGATRON_NAMES = [  # what Megatron-LM's multimodal data path and its forks import
    "Batch", "CaptioningSample", "DefaultTaskEncoder", "OCRSample", "Sample", "SimilarityInterleavedSample",
    "VQASample", "MultiChoiceVQASample", "WorkerConfig", "get_loader", "get_savable_loader", "get_train_dataset",
    "get_val_datasets", "LimitDataset", "RepeatDataset", "stateless", "Cooker", "basic_sample_keys", "SkipSample",
    "TaskEncoder", "generic_batch", "batch_pad_stack", "batch_list", "batch_stack", "edataclass", "cooker",
    "TextSample", "ImageSample", "ImageClassificationSample", "InterleavedSample", "VidQASample",
]  # fmt: skip


def test_every_name_megatron_imports_exists_with_energons_fields():
    for name in MEGATRON_NAMES:
        assert hasattr(den, name), name
        theirs = getattr(energon, name)
        if isinstance(theirs, type) and issubclass(theirs, (energon.Sample, energon.Batch)):
            mine = [f.name for f in dataclasses.fields(getattr(den, name))]
            assert mine == [f.name for f in dataclasses.fields(theirs)], name
    assert den.DefaultTaskEncoder[den.CaptioningSample, den.CaptioningSample, den.Batch, dict] is not None


def _samples(api, n=3):
    return [
        api.CaptioningSample(
            __key__=f"k{i}", __restore_key__=("Webdataset", "s.tar", i), __subflavors__={"a": i},
            image=torch.ones(3, 2 + i, 2), caption=f"c{i}",
        )
        for i in range(n)
    ]  # fmt: skip


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def test_default_batching_equals_energons():
    assert _plain(den.generic_batch(_samples(den))) == _plain(energon.generic_batch(_samples(energon)))
    mine, theirs = den.DefaultTaskEncoder(), energon.DefaultTaskEncoder()
    assert _plain(mine.batch(_samples(den))) == _plain(theirs.batch(_samples(energon)))

    @dataclasses.dataclass
    class MyBatch(den.Batch):
        image: torch.Tensor
        caption: list

    @dataclasses.dataclass
    class TheirBatch(energon.Batch):
        image: torch.Tensor
        caption: list

    assert _plain(MyBatch.from_samples(_samples(den))) == _plain(TheirBatch.from_samples(_samples(energon)))
    typed = den.DefaultTaskEncoder(raw_batch_type=MyBatch, batch_type=dict)
    out = typed.encode_batch(typed.batch(_samples(den)))
    their_encoder = energon.DefaultTaskEncoder(raw_batch_type=TheirBatch, batch_type=dict)
    assert isinstance(out, dict) and out["caption"] == ["c0", "c1", "c2"]
    assert _plain(out) == _plain(their_encoder.encode_batch(their_encoder.batch(_samples(energon))))
    derived = den.CaptioningSample.derive_from(_samples(den)[1], image=None, caption="x")
    assert derived.__key__ == "k1" and derived.__subflavors__ == {"a": 1} and derived["caption"] == "x"


@pytest.fixture(scope="module")
def crude(tmp_path_factory):
    root = tmp_path_factory.mktemp("crude")
    build_shards(root, shard_sizes=(4, 4), long_names=False)
    prepare_webdataset(root, progress=False)
    return root


class Cooked(den.DefaultTaskEncoder):
    cookers = [
        Cooker(stateless(lambda s: den.TextSample(**basic_sample_keys(s), text="A " + s["txt"])), {"kind": "a"}),
        Cooker(stateless(lambda s: den.TextSample(**basic_sample_keys(s), text="B " + s["txt"]))),
    ]

    def batch(self, samples):
        return [(type(s).__name__, s.text[:2], s.__subflavors__) for s in samples]


def test_cookers_run_per_crude_sample_by_subflavors(crude):
    for subflavors, prefix in (({"kind": "a"}, "A "), ({"kind": "b"}, "B ")):
        loader = datareel.Loader(
            datareel.open_dataset(crude, subflavors=subflavors), global_batch_size=8, micro_batch_size=8,
            task_encoder=Cooked(),
        )  # fmt: skip
        batch = next(iter(loader))
        assert batch == [("TextSample", prefix, subflavors)] * 8

    class OnlyA(Cooked):
        cookers = Cooked.cookers[:1]

    loader = datareel.Loader(
        datareel.open_dataset(crude), global_batch_size=2, micro_batch_size=2, task_encoder=OnlyA()
    )
    with pytest.raises(datareel.BatchError, match=r"no cooker .* matches sample .* subflavors \{\}"):
        next(iter(loader))

    class NeedsPrimary(Cooked):
        cookers = [Cooker(den.cooker(need_primary=True)(lambda s, primary: s))]

    with pytest.raises(datareel.OptionError, match="need_primary"):
        datareel.Loader(
            datareel.open_dataset(crude), global_batch_size=2, micro_batch_size=2, task_encoder=NeedsPrimary()
        )


class PrePost(den.DefaultTaskEncoder):
    """Energon's split encoding: preencode measures (planned on every rank), postencode does the work."""

    def preencode_sample(self, sample):
        return {"key": sample["__key__"], "n": len(sample["txt"])}

    @stateless(restore_seeds=True)
    def postencode_sample(self, sample):
        return {**sample, "heavy": int(torch.randint(0, 10**6, ()).item())}

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples):
        return {"keys": [s["key"] for s in samples], "heavy": [s["heavy"] for s in samples]}

    def batch(self, packs):
        return packs


@pytest.mark.workers
def test_preencode_is_planned_and_postencode_runs_on_the_packed_samples(crude):
    def run(workers):
        loader = datareel.Loader(
            datareel.open_dataset(crude), global_batch_size=2, micro_batch_size=2, num_workers=workers, seed=3,
            task_encoder=PrePost(), repeat=False, stage=datareel.WindowedStage(window=3, pack=True, background=False),
        )  # fmt: skip
        return [p for batch in loader for p in batch]

    packs = run(0)
    keys = sorted(k for p in packs for k in p["keys"])
    assert keys == sorted(datareel.open_dataset(crude).key(i) for i in range(8))
    assert all(len(p["keys"]) <= 2 for p in packs) and len({h for p in packs for h in p["heavy"]}) == 8
    assert run(2) == packs  # postencode's randomness is keyed by (seed, position, output): same in workers


class Skipping(den.DefaultTaskEncoder):
    def encode_sample(self, sample):
        if sample["__key__"].endswith(("1", "5")):
            raise den.SkipSample()
        yield sample["__key__"]

    def batch(self, samples):
        return samples


def test_skip_sample_is_exact_in_the_windowed_stage_and_substituted_elsewhere(crude):
    loader = datareel.Loader(
        datareel.open_dataset(crude), global_batch_size=2, micro_batch_size=2, repeat=False, task_encoder=Skipping(),
        stage=datareel.WindowedStage(window=4, background=False),
    )  # fmt: skip
    keys = [k for batch in loader for k in batch]
    assert sorted(keys) == ["s00000", "s00002", "s00003", "s00004", "s00006", "s00007"] and loader.dropped == 2

    class Plain(den.DefaultTaskEncoder):
        def encode_sample(self, sample):
            if sample["__key__"] == "s00001":
                raise den.SkipSample()
            return sample["__key__"]

        def batch(self, samples):
            return samples

    plain = datareel.Loader(
        datareel.open_dataset(crude), global_batch_size=8, micro_batch_size=8, repeat=False, shuffle=False,
        task_encoder=Plain(),
    )  # fmt: skip
    (batch,) = list(plain)
    assert len(batch) == 8 and "s00001" not in batch  # substituted by another sample of the source
