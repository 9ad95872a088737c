"""The default name of a prepared WebDataset split: what it holds, not where it lives.

A source's name keys its shuffle and goes into checkpoints (:mod:`datareel.state`), so it must be the same
for every copy of the same prepared data: the directory prepared locally, that directory uploaded to a
bucket, and the same raw shards prepared again elsewhere.  The folder's name differs between them; what
``.nv-meta`` records about the split does not.  The default name is therefore the split and a digest of its
layout in ``.nv-meta`` (read at open; no shard is read for it): the split's shard paths (relative to the
dataset, in the split's order), each shard's sample count, and the samples the split excludes by key::

    train@3f0c9a51d2e47b86

It is a digest of the layout, not of the bytes: identical for copies of the same prepared data, and equally
for *different* datasets with the same layout (same shard paths and counts, other bytes), which then share
one name, one order and each other's checkpoints.  Give such datasets a ``name=``; in one blend they are
refused (:mod:`datareel.blend.distinct`), since a state could not tell them apart.

A deliberate ``name=`` wins (``open_dataset(path, name="corpus")``), and is how a checkpoint written before
this rule (when the default was ``<folder>/<split>``, e.g. ``ds/train``) keeps its order:
``open_dataset(path, name="ds/train")``, ``datareel verify --name ds/train``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from .meta import Split

NAME_DOMAIN = "datareel.webdataset.content:1"
"""Hashed first, so that a later rule for the digest can never give an old digest another meaning."""


def content_name(label: str, split: Split, counts: Sequence[int]) -> str:
    """``"<label>@<16 hex digits>"``: the split's label (``train``; ``all`` for every shard) and BLAKE2b (8 bytes)
    of its shard paths, their sample ``counts`` and the keys it excludes (its layout, not its bytes)."""
    record = [
        NAME_DOMAIN,
        label,
        [[shard, int(count)] for shard, count in zip(split.shards, counts)],
        {shard: sorted(keys) for shard, keys in split.excluded_samples.items() if keys},
    ]
    blob = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{label}@{hashlib.blake2b(blob.encode('utf-8', 'surrogatepass'), digest_size=8).hexdigest()}"
