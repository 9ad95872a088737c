"""Encoders and datasets more than one test module uses (classes at module level, so they pickle by
reference into worker and planning processes under every start method)."""

from __future__ import annotations

import numpy as np

import datareel


class NoisyEncoder:
    """Records the per-sample RNG draw, so I4 is checked along with the order."""

    def encode_sample(self, sample):
        return {**sample, "noise": int(datareel.sample_rng().integers(0, 2**31))}


class Keys:
    def batch(self, samples):
        return [s["__key__"] for s in samples]


class Packer:
    """Packs keep their ids; a pack's randomness comes from sample_rng (keyed by the packed position)."""

    def encode_sample(self, sample):
        return {"id": sample["id"], "len": sample["len"], "noise": int(datareel.sample_rng().integers(0, 1000))}

    def pack_selected_samples(self, samples):
        return {
            "ids": [s["id"] for s in samples],
            "total": sum(s["len"] for s in samples),
            "noise": [s["noise"] for s in samples],
            "pack_noise": int(datareel.sample_rng().integers(0, 1000)),
        }

    def batch(self, packs):
        return {k: [p[k] for p in packs] for k in packs[0]}

    def truncate_sample(self, sample, max_length):
        return {**sample, "len": max_length}


def lengths_dataset(lengths, name="docs"):
    data = datareel.from_sequence([{"id": i, "len": int(n)} for i, n in enumerate(lengths)], name=name)
    table = np.asarray(lengths, dtype=np.int64)
    return data, (lambda source, idx: table[idx])


class Knapsack:
    """Energon-style online packing: a greedy knapsack over an *encoded* length (known only after encoding)."""

    cap = 12

    def encode_sample(self, sample):
        n = 1 + int(datareel.sample_rng().integers(0, 2))  # a generator: 1 or 2 outputs per input
        for k in range(n):
            yield {"id": sample["id"], "part": k, "len": (sample["id"] * 7 + k) % 9 + 1}

    def select_samples_to_pack(self, samples):
        packs, current, total = [], [], 0
        for s in sorted(samples, key=lambda s: -s["len"]):
            if current and total + s["len"] > self.cap:
                packs.append(current)
                current, total = [], 0
            current.append(s)
            total += s["len"]
        return packs + ([current] if current else [])

    def pack_selected_samples(self, samples):
        return {
            "members": [(s["id"], s["part"]) for s in samples],
            "total": sum(s["len"] for s in samples),
            "noise": int(datareel.sample_rng().integers(0, 1000)),
        }

    def batch(self, packs):
        return {k: [p[k] for p in packs] for k in packs[0]}


class Splitter:
    """Yields 0, 1 or 2 outputs per input, how many drawn from the sample's seeded RNG (or fixed by id)."""

    def __init__(self, fixed: dict | None = None):
        self.fixed = fixed or {}

    def encode_sample(self, sample):
        n = self.fixed.get(sample["id"], int(datareel.sample_rng().integers(0, 3)))
        for k in range(n):
            yield {"id": sample["id"], "part": k, "noise": int(datareel.sample_rng().integers(0, 1000))}

    def batch(self, samples):
        return {k: [s[k] for s in samples] for k in samples[0]}
