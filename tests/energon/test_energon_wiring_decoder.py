"""A task encoder's ``decoder`` decides how the loader decodes parts (``SampleDecoder(image_decode=)``, ``None``:
raw bytes), beside megatron.energon on the same prepared dataset; an ``image_decode=`` that contradicts it is
refused by name."""

from __future__ import annotations

import megatron.energon as me
import pytest

import datareel
import datareel.energon as den
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import build_shards


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    root = tmp_path_factory.mktemp("captions")
    build_shards(root, shard_sizes=(3, 2), long_names=False)
    prepare_webdataset(
        root, sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"}, progress=False
    )
    return root


def _encoder(lib, decoder):
    class Encoder(lib.DefaultTaskEncoder):
        def batch(self, samples):
            return samples

    Encoder.decoder = decoder
    return Encoder()


def _seen(lib, root, decoder, **extra):
    config = lib.WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = lib.get_val_dataset(
        str(root), split_part="train", worker_config=config, batch_size=1, task_encoder=_encoder(lib, decoder), **extra
    )
    options = {"watchdog_timeout_seconds": None} if lib is den else {}
    out = {}
    for batch in lib.get_loader(dataset, **options):
        for sample in batch:
            out[sample.__key__] = (type(sample).__name__, type(sample.image).__module__.split(".")[0])
    return out


@pytest.mark.parametrize("image_decode", ["pil", "pilrgb", "torchrgb"])
def test_a_sample_decoder_on_the_task_encoder_decodes_images_as_energon(captions, image_decode):
    theirs = _seen(me, captions, me.SampleDecoder(image_decode=image_decode))
    ours = _seen(den, captions, den.SampleDecoder(image_decode=image_decode))
    assert ours == theirs and len(ours) == 5


def test_decoder_none_gives_raw_bytes_as_energon(captions):
    theirs = _seen(me, captions, None)
    ours = _seen(den, captions, None)
    assert ours == theirs and {kind for _, kind in ours.values()} == {"builtins"}


def test_an_image_decode_argument_that_contradicts_the_decoder_is_refused(captions):
    with pytest.raises(datareel.OptionError, match="image_decode='pil' contradicts the task encoder's decoder"):
        _seen(den, captions, den.SampleDecoder(image_decode="torchrgb"), image_decode="pil")
