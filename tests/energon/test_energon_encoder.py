"""Task encoders written for Energon run unmodified; what cannot work is refused clearly."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from megatron.energon import Batch, CaptioningSample, DefaultTaskEncoder, stateless

import datareel
from datareel import DatareelError
from datareel.cli.prepare import prepare_webdataset
from datareel.testing import Topology, check_restore_everywhere
from wds_helpers import build_shards


@dataclasses.dataclass
class CaptionBatch(Batch):
    images: torch.Tensor
    captions: list


class CaptionEncoder(DefaultTaskEncoder[CaptioningSample, CaptioningSample, CaptionBatch, dict]):
    """Written against Energon: attribute access, @stateless(restore_seeds=True), dataclass batches."""

    @stateless(restore_seeds=True)
    def encode_sample(self, sample: CaptioningSample) -> CaptioningSample:
        sample.image = sample.image[:, :4, :4] * 0 + random.random()  # global RNG, reseeded per sample
        sample.caption = sample.caption.upper()
        return sample

    def batch(self, samples: list[CaptioningSample]) -> CaptionBatch:
        return CaptionBatch(
            images=torch.stack([s.image for s in samples]),
            captions=[s.caption for s in samples],
            __key__=[s.__key__ for s in samples],
            __restore_key__=(),
            __subflavors__=[],
            __sources__=(),
        )

    def encode_batch(self, batch: CaptionBatch) -> dict:
        return {"images": batch.images, "captions": batch.captions, "keys": batch.__key__}

    def pack_selected_samples(self, samples: list[CaptioningSample]) -> CaptioningSample:
        return samples[0]


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    root = tmp_path_factory.mktemp("captions")
    build_shards(root, shard_sizes=(6, 5), long_names=False)
    prepare_webdataset(
        root, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"}, progress=False
    )
    return root


@pytest.mark.workers
def test_energon_encoder_runs_unmodified(captions):
    loader = datareel.Loader(
        datareel.open_dataset(captions), global_batch_size=4, micro_batch_size=4, seed=1, task_encoder=CaptionEncoder()
    )
    batch = next(iter(loader))
    assert batch["images"].shape == (4, 3, 4, 4) and all(c.startswith("SAMPLE NUMBER") for c in batch["captions"])
    again = next(
        iter(
            datareel.Loader(
                datareel.open_dataset(captions),
                global_batch_size=4,
                micro_batch_size=2,
                rank=1,
                world_size=2,
                seed=1,
                task_encoder=CaptionEncoder(),
                num_workers=1,
            )
        )
    )
    assert torch.equal(again["images"], batch["images"][2:])  # restore_seeds: same per position everywhere


@pytest.mark.workers
def test_energon_encoder_elastic(captions):
    class Records(CaptionEncoder):
        def encode_batch(self, batch):
            return {"keys": batch.__key__, "value": batch.images[:, 0, 0, 0].tolist(), "captions": batch.captions}

    report = check_restore_everywhere(
        datareel.open_dataset(captions),
        global_batch_size=4,
        before=Topology(2, 1, 2),
        after=Topology(4, 0, 1),
        global_batches=6,
        seed=3,
        task_encoder=Records(),
    )
    assert report["restored"] >= 6


def test_batch_group_criterion_is_refused(captions):
    encoder = type("Custom", (CaptionEncoder,), {"batch_group_criterion": lambda self, sample: ("a", 4)})()
    with pytest.raises(DatareelError, match="batch_group_criterion"):
        datareel.Loader(datareel.open_dataset(captions), global_batch_size=2, micro_batch_size=2, task_encoder=encoder)


def test_typed_samples_are_energons_classes_for_an_energon_encoder(captions):
    """An encoder deriving from megatron.energon's TaskEncoder gets megatron.energon's sample classes, so its
    isinstance checks hold; datareel's own reader yields datareel.energon's classes."""
    seen = []

    class Checking(CaptionEncoder):
        @stateless(restore_seeds=True)
        def encode_sample(self, sample):
            seen.append(type(sample))
            return super().encode_sample.__wrapped__(self, sample)

    loader = datareel.Loader(
        datareel.open_dataset(captions), global_batch_size=2, micro_batch_size=2, task_encoder=Checking()
    )
    next(iter(loader))
    assert seen and all(cls is CaptioningSample for cls in seen)
    mine = datareel.open_dataset(captions).read(0)
    assert isinstance(mine, datareel.energon.CaptioningSample) and not isinstance(mine, CaptioningSample)
    assert mine.__subflavors__ == {} and mine.__restore_key__[0] == "Webdataset"


def test_crude_samples_support_attribute_access(tmp_path):
    build_shards(tmp_path, shard_sizes=(2,), long_names=False)
    prepare_webdataset(tmp_path, progress=False)
    sample = datareel.open_dataset(tmp_path).read(0)
    assert sample.txt == sample["txt"] and sample.__key__ == "s00000" and sample.__subflavors__ == {}
    sample.txt = "x"
    assert sample["txt"] == "x"
    with pytest.raises(AttributeError, match="no field 'nope'"):
        _ = sample.nope


def test_select_samples_to_pack_is_harmless_without_packing_and_ambiguous_with_it(captions):
    encoder = type("Packs", (CaptionEncoder,), {"select_samples_to_pack": lambda self, samples: [samples]})()
    loader = datareel.Loader(
        datareel.open_dataset(captions), global_batch_size=2, micro_batch_size=2, task_encoder=encoder
    )
    assert next(iter(loader)) is not None  # never called: packing is off
    with pytest.raises(datareel.OptionError, match="select_samples_to_pack"):
        datareel.Loader(
            datareel.open_dataset(captions),
            global_batch_size=2,
            micro_batch_size=2,
            task_encoder=encoder,
            packing=datareel.Packing(max_length=10_000, length="bytes"),
        )


seen_errors: list = []


def record_error(exc, key, sources=None):  # Energon's handler signature (module level: picklable)
    seen_errors.append((type(exc).__name__, key))


def test_energon_handler_and_image_decode_arguments_are_honoured(captions):
    from PIL import Image

    from datareel import energon as den

    class FailsOne:
        def encode_sample(self, sample):
            if sample.__key__ == "s00003":
                raise ValueError("broken image")
            return {"key": sample.__key__, "is_pil": isinstance(sample.image, Image.Image)}

        def batch(self, samples):
            return samples

    config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
    seen_errors.clear()
    ds = den.get_val_dataset(
        str(captions),
        split_part="train",
        worker_config=config,
        batch_size=4,
        task_encoder=FailsOne(),
        handler=record_error,
        image_decode="pil",
    )
    samples = [s for batch in den.get_loader(ds) for s in batch]
    keys = [s["key"] for s in samples]
    assert ("ValueError", "s00003") in seen_errors and "s00003" not in keys
    assert len(keys) == len(datareel.open_dataset(captions)) and all(s["is_pil"] for s in samples)

    def refuse(exc, key, sources=None):
        raise RuntimeError(f"stop at {key}")

    ds = den.get_val_dataset(
        str(captions), split_part="train", worker_config=config, batch_size=4, task_encoder=FailsOne(), handler=refuse
    )
    with pytest.raises(RuntimeError, match="stop at s00003") as stopped:  # the handler's own exception, as Energon
        list(den.get_loader(ds))
    assert type(stopped.value) is RuntimeError
