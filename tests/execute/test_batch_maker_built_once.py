"""One place makes batch makers (``datareel.pipeline``): :func:`~datareel.pipeline.build` for a Loader's reel,
and :func:`~datareel.pipeline.batch_maker` for an order a facade keeps itself (``datareel.energon``'s val
passes).  Both make the same maker from the same options, and ``batch_maker`` refuses what needs a reel."""

from __future__ import annotations

import pytest

import datareel
from datareel.blend.build import build_plan
from datareel.errors import OptionError
from datareel.options import LoaderOptions
from datareel.pipeline import batch_maker, build


class Doubles:
    def encode_sample(self, sample):
        return sample * 2


class Generates:
    def encode_sample(self, sample):
        yield sample


def handler(exc, sample, sources=None):
    return None


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"task_encoder": Doubles(), "on_error": "substitute", "error_handler": handler},
        {"reseed_global_rng": True, "task_encoder": Doubles()},
        {"map_threads": 2, "task_encoder": Doubles()},
    ],
    ids=["default", "encoder-and-handler", "reseed", "threads"],
)
def test_batch_maker_makes_what_build_makes(options):
    source = datareel.from_sequence(list(range(20)), name="twenty")
    plan, sources = build_plan(source, seed=3, shuffle=False)
    loader_options = LoaderOptions(global_batch_size=4, micro_batch_size=4, **options)
    built = build(plan, sources, name="twenty", seed=3, options=loader_options).maker
    alone = batch_maker(sources, seed=3, options=loader_options)
    assert alone.options == built.options
    assert type(alone.encoder) is type(built.encoder) and alone.encoder.reseeds == built.encoder.reseeds


@pytest.mark.parametrize(
    "options,named",
    [
        ({"packing": datareel.Packing(max_length=8, length=len)}, "packing and stage= plan a reel"),
        ({"stage": datareel.WindowedStage()}, "packing and stage= plan a reel"),
        ({"task_encoder": Generates()}, "a generator encode_sample runs in the windowed stage"),
    ],
    ids=["packing", "stage", "generator"],
)
def test_batch_maker_refuses_what_plans_a_reel(options, named):
    source = datareel.from_sequence(list(range(20)), name="twenty")
    with pytest.raises(OptionError, match=named):
        batch_maker([source], seed=0, options=LoaderOptions(global_batch_size=4, micro_batch_size=4, **options))
