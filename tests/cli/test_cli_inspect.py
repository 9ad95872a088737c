"""``datareel inspect``: states written by real loaders (plain, mixed, packed, packed mid-window, a windowed
stage), saved as JSON, inside a torch.save file and through DCP; the topologies it lists are exactly those
the Loader itself accepts; damaged and foreign files are refused, naming why."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import datareel
from datareel import Packing, TopologyError, WindowedStage
from datareel.cli import main
from profiles import examples

LENGTHS = np.random.default_rng(0).integers(1, 9, 60)


def length_of(source, indices):
    return LENGTHS[indices]


class Packer:
    def encode_sample(self, sample):
        yield sample

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 3] for i in range(0, len(samples), 3)]

    def pack_selected_samples(self, samples):
        return {"ids": [s["id"] for s in samples]}

    def batch(self, packs):
        return packs


class PackOnly:
    def pack_selected_samples(self, samples):
        return {"ids": [s["id"] for s in samples]}

    def batch(self, packs):
        return packs


class Foreign:
    """An object a weights-only load refuses."""


def records(n, name="recs"):
    return datareel.from_sequence([{"id": i} for i in range(n)], name=name)


def make(kind):
    common = dict(global_batch_size=12, micro_batch_size=3, world_size=2, rank=0, seed=1)
    if kind == "plain":
        return datareel.Loader(records(50), **common)
    if kind == "mixed":
        return datareel.Loader(datareel.mix([(records(30, "a"), 0.7), (records(20, "b"), 0.3)]), **common)
    if kind.startswith("packed"):
        packing = Packing(max_length=10, length=length_of, window=7)
        return datareel.Loader(records(60), packing=packing, task_encoder=PackOnly(), **common)
    return datareel.Loader(records(60), task_encoder=Packer(), stage=WindowedStage(window=7, pack=True), **common)


def saved(kind, steps=3):
    loader = make(kind)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    while kind == "packed mid-window" and loader.state_dict()["pack"][1] == 0:
        next(it)  # on to a cursor inside a window (its next pack is not the window's first)
    return loader


def run(capsys, *args):
    code = main(["inspect", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("container", ["json", "torch.save", "dcp"])
@pytest.mark.parametrize(
    "kind", ["plain", "mixed", "packed", "packed mid-window", pytest.param("windowed", marks=pytest.mark.workers)]
)
def test_inspect_reads_what_real_loaders_save(tmp_path, capsys, kind, container):
    loader = saved(kind)
    state = loader.state_dict()
    if kind == "packed mid-window":
        assert state["pack"][1] > 0  # the next pack is not its window's first
    path = tmp_path / "ckpt"
    if container == "json":
        path.write_text(json.dumps(state))
    elif container == "torch.save":
        torch.save({"model": {"w": torch.ones(2)}, "step": 3, "dataloader": state}, path)
    else:
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
            dcp.save({"loader": loader, "w": torch.ones(2)}, checkpoint_id=str(path))
    code, out, _ = run(capsys, path, "--json")
    assert code == 0
    got = json.loads(out)
    G = 12
    assert (got["cursor"], got["pack"], got["check"]) == (state["cursor"], state.get("pack"), "ok")
    assert (got["global_batch"], got["into_global_batch"]) == divmod(state["cursor"], G)
    assert got["unit"] == {"plain": "samples", "mixed": "samples"}.get(kind, "packs")
    assert got["dataset"]["digest"] == state["spec"]["dataset"]["digest"]
    assert got["key"] == {"json": "", "torch.save": "dataloader", "dcp": "loader"}[container]
    if kind == "mixed":
        assert [s[0] for s in got["sources"]] == ["a", "b"]
    if kind == "plain":
        assert (got["epoch"], got["epoch_offset"]) == divmod(state["cursor"], 50)
    code, text, _ = run(capsys, path)
    assert code == 0 and f"global batch {state['cursor'] // G}" in text and "resumes on" in text
    loader.close()


@settings(max_examples=examples(0.12))
@given(
    G=st.sampled_from([4, 6, 8, 12, 18, 24]),
    steps=st.integers(0, 7),
    data=st.data(),
)
def test_the_topologies_listed_are_exactly_those_the_loader_accepts(tmp_path_factory, G, steps, data):
    saving = [(w, m) for w in range(1, G + 1) for m in range(1, G + 1) if G % (w * m) == 0]
    W, m = data.draw(st.sampled_from(saving))
    loader = datareel.Loader(records(40), global_batch_size=G, micro_batch_size=m, world_size=W, rank=0, seed=2)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    state = loader.state_dict()
    path = tmp_path_factory.mktemp("state") / "state.json"
    path.write_text(json.dumps(state))
    assert main(["inspect", str(path), "--json"]) == 0
    from datareel.cli.inspect_state import describe_state, load_state_file

    listed = {tuple(p) for p in describe_state(load_state_file(path)[0])["resume"]["pairs"]}
    accepted = set()
    for w, mm in saving:  # every topology that fits G; the loader says which resume this state
        other = datareel.Loader(records(40), global_batch_size=G, micro_batch_size=mm, world_size=w, rank=0, seed=2)
        try:
            other.load_state_dict(state)
            accepted.add((w, mm))
        except TopologyError:
            pass
    assert listed == accepted and (W, m) in listed


def test_damaged_and_foreign_files_are_refused_naming_why(tmp_path, capsys):
    state, other = saved("plain").state_dict(), saved("mixed").state_dict()
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**state, "cursor": state["cursor"] + 1}))
    code, out, _ = run(capsys, edited)
    assert code == 1 and "MISMATCH" in out  # printed, and the exit code says it is not to be trusted

    cases = {
        "model only": ({"model": torch.ones(2)}, "holds no datareel loader state"),
        "two states": ({"a": state, "b": {"x": [other]}}, r"2 datareel loader states, at \['a', 'b.x.0'\]"),
        "energon": ({"loader": {"worker_states": [], "micro_batch_size": 2}}, "Megatron-Energon loader state"),
        "version 2": ({**state, "version": 2}, "state version 2"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.pt"
        torch.save(content, path)
        code, _, err = run(capsys, path)
        assert code == 1 and message.replace("\\", "") in err.replace("\\", ""), (name, err)
    code, out, _ = run(capsys, tmp_path / "two states.pt", "--key", "b.x.0", "--json")
    assert code == 0 and json.loads(out)["key"] == "b.x.0"
    code, _, err = run(capsys, tmp_path / "two states.pt", "--key", "b.y")
    assert code == 1 and "no 'y' there (found ['x'])" in err
    unsafe = tmp_path / "unsafe.pt"
    torch.save({"loader": state, "obj": Foreign()}, unsafe)  # unpickling it would run Foreign's code
    code, _, err = run(capsys, unsafe)
    assert code == 1 and "does not unpickle arbitrary objects unless told to" in err and "--trusted" in err
    code, out, _ = run(capsys, unsafe, "--trusted", "--json")  # a checkpoint the user vouches for
    assert code == 0 and json.loads(out)["cursor"] == state["cursor"]
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01 not a checkpoint")
    assert run(capsys, garbage)[0] == 1
    (tmp_path / "dir").mkdir()
    code, _, err = run(capsys, tmp_path / "dir")
    assert code == 1 and "not a torch.distributed.checkpoint directory" in err
    code, _, err = run(capsys, tmp_path / "missing.json")
    assert code == 1 and "no such file" in err


def test_with_the_dataset_inspect_gives_each_sources_epoch_and_offset(tmp_path, capsys):
    for name, n in (("a", 12), ("b", 5)):
        (tmp_path / f"{name}.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(n)))
        assert main(["prepare", str(tmp_path / f"{name}.jsonl")]) == 0
    blend = tmp_path / "mix.yaml"
    blend.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 2\n        path: a.jsonl\n      - weight: 1\n        path: b.jsonl\n"
    )
    job = datareel.Loader(datareel.open_dataset(blend), global_batch_size=6, micro_batch_size=3, world_size=1, seed=1)
    it = iter(job)
    for _ in range(9):  # 27 samples: 18 of a (a new epoch every 12) and 9 of b (every 5)
        next(it)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(job.state_dict()))
    capsys.readouterr()
    assert main(["inspect", str(path), "--dataset", str(blend), "--json"]) == 0
    per_source = json.loads(capsys.readouterr().out)["per_source"]
    got = {s["name"]: (s["read"], s["epoch"], s["offset"]) for s in per_source["sources"]}
    assert per_source["inputs_read"] == 27 and sorted(got.values()) == [(9, 1, 4), (18, 1, 6)]
    other = tmp_path / "other.yaml"
    other.write_text(blend.read_text().replace("weight: 1", "weight: 3"))
    code = main(["inspect", str(path), "--dataset", str(other)])
    assert code == 1 and "does not belong to" in capsys.readouterr().err


class Evil:
    """Unpickling it would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_dcp_checkpoint_is_read_without_unpickling_objects_or_tensors(tmp_path, capsys):
    import torch.distributed.checkpoint as dcp

    loader = saved("plain")
    marker = tmp_path / "PWNED"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"loader": loader, "extra": Evil(marker), "w": torch.ones(10)}, checkpoint_id=str(tmp_path / "c"))
    code, out, _ = run(capsys, tmp_path / "c", "--json")
    assert code == 0 and json.loads(out)["cursor"] == loader.state_dict()["cursor"]
    assert not marker.exists()  # the pickled object was never loaded


def test_copies_of_one_state_are_one_state(tmp_path, capsys):
    state = saved("plain").state_dict()
    torch.save([state, state, state], tmp_path / "ranks.pt")  # Energon's facade saves one per rank
    (tmp_path / "ranks.json").write_text(json.dumps([state, state]))
    for name in ("ranks.pt", "ranks.json"):
        code, out, _ = run(capsys, tmp_path / name, "--json")
        assert code == 0 and json.loads(out)["key"] == "0", name
