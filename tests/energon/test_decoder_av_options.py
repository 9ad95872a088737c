"""A task encoder's ``SampleDecoder(av_decode=..., video_decode_audio=...)`` (either library's): datareel's readers
leave audio and video parts as their bytes, so a non-default value would change nothing; it is refused by name
with the fix (decode in a cooker), and the defaults still open.  ``SampleDecoder.decode`` (a cooker's, a file
store's) does make an ``AVDecoder`` of an audio/video part."""

from __future__ import annotations

import megatron.energon as me
import pytest

from datareel import OptionError
from datareel.energon import SampleDecoder as FacadeDecoder
from datareel.energon.av import AVDecoder
from datareel.energon.decoding import decoding_options
from datareel.energon.flavors.webdataset.sample_decoder import open_options
from datareel.formats.webdataset.decode import PartDecoder

LIBRARIES = {"datareel.energon": FacadeDecoder, "megatron.energon": me.SampleDecoder}
CHANGED = [{"av_decode": "torch"}, {"av_decode": "pyav"}, {"video_decode_audio": True}]


class Encoder(me.DefaultTaskEncoder):
    pass


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("changed", CHANGED, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_a_non_default_av_option_on_a_task_encoder_is_refused_by_name(library, changed):
    decoder = LIBRARIES[library](**changed)
    for call in (lambda: open_options(decoder), lambda: decoding_options({}, _encoder(decoder), "get_train_dataset")):
        with pytest.raises(OptionError) as raised:
            call()
        text = str(raised.value)
        name, value = next(iter(changed.items()))
        assert f"{name}={value!r}" in text and "raw bytes" in text and ".decode(name, raw)" in text, text


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_default_av_options_open(library):
    decoder = LIBRARIES[library](image_decode="pil", av_decode="AVDecoder", video_decode_audio=False)
    assert open_options(decoder) == {"image_decode": "pil"}
    assert decoding_options({}, _encoder(decoder), "get_train_dataset") == {"image_decode": "pil"}


def test_what_the_readers_give_for_an_audio_part_and_what_decode_gives():
    assert PartDecoder("torchrgb")("wav", b"RIFF....", "x") == b"RIFF...."  # the readers: the bytes
    made = FacadeDecoder(av_decode="torch").decode("s0.wav", b"RIFF....")
    assert isinstance(made, AVDecoder) and made.data == b"RIFF...." and made.av_decode == "torch"


def _encoder(decoder):
    encoder = Encoder()
    encoder.decoder = decoder
    return encoder
