"""The window reel under any planner: length-planned packing in the planning process, descriptors as units
(numpy-backed, cheap to pickle), and a planner's malformed units named."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import datareel
from datareel.reel import Descriptor, LengthPlanner, Units, WindowReel
from datareel.testing import Topology, check_restore_everywhere
from encoders import Packer, lengths_dataset


def _batches(loader):
    return [(batch["__packs__"], batch["ids"], batch["__positions__"].tolist()) for batch in loader]


@pytest.mark.workers
def test_length_planned_packing_plans_the_same_packs_in_the_planning_process():
    lengths = np.random.default_rng(4).integers(1, 9, 120)
    data, length = lengths_dataset(lengths)
    common = dict(global_batch_size=4, micro_batch_size=2, repeat=False, task_encoder=Packer())
    inline = datareel.Loader(data, packing=datareel.Packing(max_length=16, length=length, window=10), **common)
    packing = datareel.Packing(max_length=16, length=length, window=10, background=True)
    background = datareel.Loader(data, packing=packing, **common)
    assert isinstance(background.reel, WindowReel) and isinstance(background.reel.planner, LengthPlanner)
    assert _batches(background) == _batches(inline)
    assert background.reel.planning._process is not None  # it did plan in a planning process
    assert background.state_dict() == inline.state_dict()  # background is not part of the spec
    background.close()
    report = check_restore_everywhere(
        data, global_batch_size=4, before=Topology(2, 0, 1), after=Topology(1, 0, 2), global_batches=3,
        task_encoder=Packer(), packing=packing,
    )  # fmt: skip
    assert report["restored"] >= 1


def test_the_packing_spec_and_its_json_form_both_ways():
    packing = datareel.Packing(max_length=8, window=4, over_length="drop", length="bytes")
    saved = packing.to_json()
    assert saved == {"max_length": 8, "window": 4, "over_length": "drop", "length": "bytes"}
    assert datareel.Packing.from_json(saved) == packing
    named = datareel.Packing(max_length=8, length=len).to_json("0123456789abcdef")
    assert named["length"] == {"function": "len", "module": "builtins", "lengths": "0123456789abcdef"}
    with pytest.raises(datareel.OptionError, match="builtins:len.*length=fn"):
        datareel.Packing.from_json(named)
    assert datareel.Packing.from_json(named, length=len).length is len
    stage = datareel.WindowedStage(window=9, pack=True)
    assert stage.to_json("m.Enc") == {"window": 9, "pack": True, "encoder": "m.Enc"}
    assert datareel.WindowedStage.from_json(stage.to_json("m.Enc"), background=False) == datareel.WindowedStage(
        window=9, pack=True, background=False
    )


def test_a_plain_descriptor_pickles_as_its_three_arrays_and_every_descriptor_round_trips():
    positions, sources, indices = np.arange(8, dtype=np.int64), np.zeros(8, np.int32), np.arange(8, dtype=np.int64)
    plain = Descriptor(3, positions, sources, indices)
    assert plain.units is plain.positions and plain.sizes.tolist() == [1] * 8 and not plain.packs.any()
    assert len(pickle.dumps(plain)) < len(pickle.dumps((3, positions, sources, indices))) + 200
    units = Units.of([[0, 1, 2], [3], [4, 5, 6, 7]], positions, sources, indices, truncate=positions == 3)
    packed = Descriptor(
        0, units.positions, units.source_ids, units.indices, units=np.arange(10, 13), sizes=units.sizes,
        packs=units.packs, outputs=units.outputs, truncate=units.truncate,
    )  # fmt: skip
    for d in (plain, packed):
        back = pickle.loads(pickle.dumps(d))
        for name in ("positions", "source_ids", "indices", "units", "sizes", "packs", "outputs", "truncate"):
            assert getattr(back, name).tolist() == getattr(d, name).tolist(), name
        assert (back.step, back.planned) == (d.step, d.planned)
    assert units.take(1, 3).positions.tolist() == [3, 4, 5, 6, 7] and units.take(1, 3).truncate.tolist()[0]
    assert Units.concat([units.take(0, 1), units.take(1, 3)]).positions.tolist() == positions.tolist()


def test_a_planners_malformed_units_are_named():
    p, s, i = np.arange(4, dtype=np.int64), np.zeros(4, np.int32), np.arange(4, dtype=np.int64)
    with pytest.raises(datareel.DatareelError, match="unit 1 holds 0 members"):
        Units.of([[0], []], p, s, i)
    with pytest.raises(datareel.DatareelError, match="unit 0 holds 2 members.*exactly one"):
        Units.of([[0, 1]], p, s, i, packs=False)
    with pytest.raises(datareel.DatareelError, match="row 4 of a window of 4 rows"):
        Units.of([[4]], p, s, i)
