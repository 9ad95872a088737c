"""Energon's ``megatron.energon.av`` names, as far as they work without PyAV (which is not a dependency):
an audio or video part decodes to an :class:`AVDecoder` holding its bytes; anything that would decode
frames or samples raises, naming PyAV and how to get it."""

from __future__ import annotations

from typing import Any

from ...errors import OptionError

__all__ = ["AVDecoder"]


class AVDecoder:
    """An audio/video file's bytes (``.data``), decoded on demand by PyAV (``pip install av``)."""

    def __init__(self, data: bytes, *, av_decode: str = "AVDecoder", name: str = ""):
        self.data = data
        self.av_decode = av_decode
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        raise OptionError(
            f"AVDecoder.{attr} ({self.name or 'an audio/video part'}): decoding audio and video needs PyAV, "
            f"which is not installed; `pip install av`, or read the raw bytes from .data"
        )

    def __repr__(self) -> str:
        return f"AVDecoder({self.name!r}, {len(self.data)} bytes)"
