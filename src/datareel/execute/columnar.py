"""The micro-batch made straight from columns, where nothing runs per sample.

With the default task encoder (no ``encode_sample``, ``batch`` or ``encode_batch`` of the user's), no
cookers, no ``postencode_sample``, no global reseeding, a plain micro-batch (one unit per sample, nothing
packed, planned or cut) is the default collate of its samples' keys: for each key, the list of its
samples' values, collated unless it is a meta key. Sources that read a micro-batch as columns
(:meth:`~datareel.sources.base.Source.read_columns`) hand those lists over directly, so no sample is made,
copied or visited on the way: :func:`columnar` decides once, when the batch maker is built, whether this
path may run; :func:`batch_from_columns` makes the batch, or gives ``None`` (a source that cannot, any
failure), and the micro-batch is then made sample by sample, which raises under the error policy as
before. The two give the same batch, key for key and value for value (tests/test_columnar.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .encoder import DefaultTaskEncoder, ResolvedEncoder, _collate, _is_meta

if TYPE_CHECKING:
    from ..reel.base import Descriptor
    from ..sources.base import Source
    from .options import ExecOptions

_DEFAULTS = {name: getattr(DefaultTaskEncoder, name) for name in ("encode_sample", "batch", "encode_batch")}


def columnar(encoder: ResolvedEncoder, options: ExecOptions) -> bool:
    """Whether no hook runs per sample or per batch beyond the default collate (so columns may be used)."""
    default = all(getattr(getattr(encoder, name), "__func__", None) is fn for name, fn in _DEFAULTS.items())
    return (
        default
        and encoder.first == encoder.encode_sample
        and encoder.post is None
        and not encoder.windowed
        and not encoder.cookers
        and not encoder.sample_classes
        and not encoder.reseeds
        and not options.reseed_global
        and encoder.annotate  # the columns carry __source__ / __positions__
    )


def _plain(desc: Descriptor) -> bool:
    """A micro-batch of one unit per sample, nothing packed, planned, cut or of a later output."""
    return (
        not desc.planned
        and len(desc.units) == len(desc.positions)
        and not desc.packs.any()
        and not desc.truncate.any()
        and not desc.outputs.any()
    )


def batch_from_columns(sources: list[Source], names: list[str], desc: Descriptor) -> dict[str, Any] | None:
    """The default batch of plain micro-batch ``desc`` from its sources' columns, or ``None`` (see the module)."""
    if not _plain(desc):
        return None
    try:
        columns = _columns(sources, desc)
        if columns is None:
            return None
        source_names = [names[i] for i in desc.source_ids.tolist()]
        batch = {key: values if _is_meta(key) else _collate(key, values) for key, values in columns.items()}
    except Exception:  # made again sample by sample, which raises it (or substitutes) as the policy says
        return None
    batch["__source__"] = source_names  # each dict sample's, as the per-sample path adds it
    batch["__positions__"] = desc.units
    return batch


def _columns(sources: list[Source], desc: Descriptor) -> dict[str, list[Any]] | None:
    """Each key's values in the micro-batch's order, the samples of several sources interleaved; ``None``
    where a source gives none, or sources differ in their keys (the default collate refuses that)."""
    ids = desc.source_ids
    if any(sources[i].prefetches for i in np.unique(ids).tolist()):
        return None  # a bucket's micro-batch is fetched together first (BatchMaker.read_ahead)
    first = int(ids[0])
    if (ids == first).all():
        got = sources[first].read_columns(desc.indices)
        return None if got is None or "__source__" in got else got
    parts, order = [], []
    for source_id in np.unique(ids).tolist():
        rows = np.flatnonzero(ids == source_id)  # (r,)
        got = sources[source_id].read_columns(desc.indices[rows])
        if got is None or "__source__" in got or (parts and list(got) != list(parts[0])):
            return None
        parts.append(got)
        order.append(rows)
    where = np.argsort(np.concatenate(order), kind="stable").tolist()  # (k,) batch row -> row of the concatenation
    return {key: [values[j] for j in where] for key, values in _concatenated(parts).items()}


def _concatenated(parts: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    return {key: [value for part in parts for value in part[key]] for key in parts[0]}
