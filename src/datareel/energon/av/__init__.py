"""Energon's ``megatron.energon.av`` names, as far as datareel has them: an audio or video part decodes to an
:class:`AVDecoder` holding its bytes; anything that would decode frames or samples raises, saying so (datareel
decodes no audio or video; PyAV, the optional extra ``datareel[av]``, only measures media metadata in
``prepare``: :mod:`datareel.energon.media.av_probe`)."""

from __future__ import annotations

from typing import Any

from ...errors import OptionError

__all__ = ["AVDecoder"]


class AVDecoder:
    """An audio/video file's bytes (``.data``); datareel does not decode them."""

    def __init__(self, data: bytes, *, av_decode: str = "AVDecoder", name: str = ""):
        self.data = data
        self.av_decode = av_decode
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        raise OptionError(
            f"AVDecoder.{attr} ({self.name or 'an audio/video part'}): datareel's AVDecoder does not decode "
            f"audio or video; read the raw bytes from .data and decode them yourself (e.g. with PyAV)"
        )

    def __repr__(self) -> str:
        return f"AVDecoder({self.name!r}, {len(self.data)} bytes)"
