"""Energon's ``SampleDecoder``: how a sample's parts are decoded, by extension (``decoder = SampleDecoder(...)``
on a task encoder; :meth:`SampleDecoder.decode` for one file of a :class:`~datareel.energon.cache.FileStore`).

The parts are decoded by datareel's part decoder (:class:`datareel.formats.webdataset.decode.PartDecoder`:
webdataset's handlers, images per ``image_decode``), with datareel's one deliberate difference: pickle
parts stay ``bytes`` (unpickling runs code from the dataset).  :meth:`SampleDecoder.decode` (a file store's
file, a cooker's part) makes audio and video parts an :class:`~datareel.energon.av.AVDecoder` as in Energon,
which holds their bytes and does not decode them (and says so when asked to); a task encoder's decoder does
not: datareel's readers leave those parts as their bytes, and a non-default ``av_decode`` /
``video_decode_audio`` there is refused.
``guess_content=True`` picks the handler by the bytes (the ``filetype`` package), as Energon does.
"""

from __future__ import annotations

from typing import Any

from ....errors import OptionError
from ....formats.webdataset.decode import IMAGE_DECODE, PartDecoder
from ...cache.base import FileStoreDecoder
from .config import split_name_re

__all__ = [
    "AV_DECODE",
    "AV_EXTENSIONS",
    "DEFAULT_DECODER",
    "SampleDecoder",
    "as_sample_decoder",
    "open_options",
    "user_decoder",
]

AV_DECODE = ("torch", "AVDecoder", "pyav")
AV_EXTENSIONS = frozenset(
    {"mp4", "avi", "mov", "webm", "mkv", "flac", "mp3", "wav", "m4a", "ogg", "aac", "m4v", "opus", "wmv", "flv"}
)
"""The extensions Energon's audio/video handler takes."""


class SampleDecoder(FileStoreDecoder):
    """Energon's default decoder of WebDataset samples (its arguments; see the module docstring)."""

    def __init__(
        self,
        *,
        image_decode: str = "torchrgb",
        av_decode: str = "AVDecoder",
        video_decode_audio: bool = False,
        guess_content: bool = False,
    ):
        if image_decode not in IMAGE_DECODE:
            raise OptionError(f"SampleDecoder(image_decode={image_decode!r}): give one of {list(IMAGE_DECODE)}")
        if av_decode not in AV_DECODE:
            raise OptionError(f"SampleDecoder(av_decode={av_decode!r}): give one of {list(AV_DECODE)}")
        self._config = dict(
            image_decode=image_decode,
            av_decode=av_decode,
            video_decode_audio=bool(video_decode_audio),
            guess_content=bool(guess_content),
        )
        self._parts = PartDecoder(image_decode)

    def config(self) -> dict[str, Any]:
        return dict(self._config)

    def _one(self, part: str, raw: Any, where: str) -> Any:
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            return raw  # decoded already (a value, not bytes)
        if self._config["guess_content"]:
            import filetype

            kind = filetype.guess(bytes(raw[:262]))
            if kind is not None:
                part = kind.extension
        extension = part.rpartition(".")[2].lower()
        if extension in AV_EXTENSIONS:
            from ...av import AVDecoder

            return AVDecoder(bytes(raw), av_decode=self._config["av_decode"], name=where or part)
        return self._parts(part, bytes(raw), where)

    def decode(self, fname: str, raw: bytes) -> Any:
        """One file (``"<key>.<ext>"``) decoded by its extension."""
        match = split_name_re.match(fname)
        part = match.group(2) if match else "."
        return self._one(part, raw, fname)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        """Every part of a raw sample decoded (``__key__`` and the other ``__...__`` fields kept)."""
        key = sample.get("__key__", "")
        return {
            k: v if k.startswith("__") else self._one(k, v, f"sample {key!r} part {k!r}") for k, v in sample.items()
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
        return f"SampleDecoder({args})"


DEFAULT_DECODER = SampleDecoder()


def open_options(decoder: Any) -> dict[str, Any]:
    """What opening a dataset takes from a task encoder's ``decoder`` (datareel's readers decode parts
    themselves): ``None`` -> raw bytes; a :class:`SampleDecoder` (datareel.energon's, or megatron.energon's read by
    its ``config()``: :func:`datareel.energon.foreign.as_sample_decoder`) -> its ``image_decode``.  A decoder
    datareel's readers cannot apply is refused by name."""
    decoder = as_sample_decoder(decoder)
    if decoder is None:
        return {"decode": False}
    config = decoder.config()
    if config["guess_content"]:
        raise OptionError(
            "SampleDecoder(guess_content=True) on a task encoder: datareel's readers decode by extension; decode "
            "by content in a cooker (SampleDecoder(guess_content=True).decode(name, raw)) instead"
        )
    changed = {k: config[k] for k, v in _AV_DEFAULTS.items() if config[k] != v}
    if changed:  # the readers leave audio/video parts as their bytes: these would change nothing
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        raise OptionError(
            f"SampleDecoder({args}) on a task encoder: datareel's readers leave audio and video parts as their raw "
            f"bytes, so this would change nothing; keep the defaults ({_DEFAULT_AV}) and decode those parts in a "
            f"cooker with SampleDecoder({args}).decode(name, raw)"
        )
    return {"image_decode": config["image_decode"]}


_AV_DEFAULTS = {"av_decode": "AVDecoder", "video_decode_audio": False}
_DEFAULT_AV = ", ".join(f"{k}={v!r}" for k, v in _AV_DEFAULTS.items())


# -- a task encoder's decoder, megatron.energon's read by its configuration (see datareel.energon.foreign)

DECODER_CONFIG = ("image_decode", "av_decode", "video_decode_audio", "guess_content")
"""The keys of ``SampleDecoder.config()`` (megatron.energon's and the facade's)."""
_ENERGON = "megatron.energon"
_FACADE = "datareel.energon"


def as_sample_decoder(decoder: Any, where: str = "task_encoder.decoder") -> Any:
    """The facade's :class:`~datareel.energon.flavors.webdataset.sample_decoder.SampleDecoder` for ``decoder``:
    ``None`` stays ``None`` (raw bytes); the facade's own is returned as it is; any other object whose
    ``config()`` is a ``SampleDecoder`` configuration (megatron.energon's ``SampleDecoder``, or one that behaves
    as it) becomes the facade's decoder of that configuration.  A decoder with decoding code of its own (a
    ``decode`` / ``__call__`` not from a ``SampleDecoder`` of either library), or without such a configuration,
    is refused by name: datareel's readers decode the parts themselves."""
    if decoder is None or isinstance(decoder, SampleDecoder):
        return decoder
    read = getattr(decoder, "config", None)
    config = read() if callable(read) else None
    if not (isinstance(config, dict) and "image_decode" in config and set(config) <= set(DECODER_CONFIG)):
        raise OptionError(
            f"{where}={decoder!r}: datareel decodes parts with a SampleDecoder (datareel.energon's or "
            f"megatron.energon's: one whose config() gives {list(DECODER_CONFIG)}), or None for raw bytes; decode "
            f"in a cooker or encode_sample instead"
        )
    own = [name for name in ("decode", "__call__") if not _library_defined(type(decoder), name)]
    if own:
        raise OptionError(
            f"{where}={decoder!r}: {type(decoder).__name__} defines its own {' and '.join(own)}, which datareel's "
            f"readers cannot run (they decode parts by the configuration {config}); use SampleDecoder("
            f"{', '.join(f'{k}={v!r}' for k, v in config.items())}) and decode the rest in a cooker or "
            f"encode_sample"
        )
    return SampleDecoder(**config)


def _library_defined(cls: type, name: str) -> bool:
    """Whether ``cls``'s ``name`` comes from megatron.energon or the facade (not from the user's subclass)."""
    for base in cls.__mro__:
        if name in vars(base):
            return base.__module__.startswith((_ENERGON, _FACADE))
    return False


def user_decoder(task_encoder: Any, missing: Any) -> Any:
    """The ``decoder`` the user gave ``task_encoder`` (on the instance, or a class of theirs); ``missing`` when it
    has none, or only megatron.energon's class default (``TaskEncoder.decoder = SampleDecoder()``), which
    megatron.energon replaces by the ``image_decode=`` of ``get_train_dataset`` as datareel's readers do.  An
    ``AugmentTaskEncoder`` answers for the encoder it wraps."""
    if task_encoder is None:
        return missing
    if "decoder" in getattr(task_encoder, "__dict__", {}):
        return task_encoder.__dict__["decoder"]
    for cls in type(task_encoder).__mro__:
        if "decoder" in vars(cls):
            value = vars(cls)["decoder"]
            inner = getattr(task_encoder, "_task_encoder", None)
            if isinstance(value, property) and inner is not None:
                return user_decoder(inner, missing)  # an AugmentTaskEncoder forwards its decoder
            if cls.__module__.startswith(_ENERGON):
                return missing
            return task_encoder.decoder
    return missing
