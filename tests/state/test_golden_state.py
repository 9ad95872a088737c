"""Golden states: checkpoints written by datareel 0.1.0 restore, and today's states are byte-identical.

The states in ``tests/data/golden_states.json`` were written before the reel redesign (see
``tests/golden.py``).  Each must (1) be written byte for byte again by the same recipe today, and
(2) restore into a loader built by the same recipe, on another topology too, and continue with
the very batch the old code produced next.

One change is deliberate: a packing *length function* used to be fingerprinted by its bare
``__qualname__`` and is now ``{"function": qualname, "module": ..., "lengths": digest}`` (so a changed
tokenizer behind the same name is refused).  Old states naming the function still restore (by
name, with a warning); :func:`today` is the old state with only that field rewritten.

One field is added: ``check``, 16 hex digits of BLAKE2b over the JSON of ``[cursor, pack, spec]``
(sorted keys, no spaces), which binds a packed state's ``(window, offset)`` to its cursor.  The
recipe is written out here, not imported, so a change to it fails this test.

And one more where a dataset holds ``from_sequence`` sources: ``spec.dataset.content``, 16 hex digits
over items sampled from the sequences (issue 25: a sequence with the same name and length but other
items was accepted).  The golden states predate it; they still restore (accepted by name and size, with
a warning), and :func:`today` adds the field as today's code writes it.  Every other field, the
``digest`` included, is byte-identical: the WebDataset recipe (``packed_bytes``) gains nothing.

And one on the loader's side (issue 36): a prepared directory's default name, which keys its shuffle, is now
its split and a digest of its content (``train@...``), no longer its folder and split (``wds/train``), so
every copy of a dataset reads in one order. The ``packed_bytes`` states named it ``wds/train``; its recipe
opens the dataset with the documented fix, ``name="wds/train"``, and the states restore byte for byte onto
the old continuation. Without it they are refused, naming that fix
(``tests/sources/test_content_names.py``).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from golden import GOLDEN, build, plain

ENTRIES = json.loads(GOLDEN.read_text())["entries"]
IDS = [f"{e['recipe']}-{e['steps']}" for e in ENTRIES]


def today(old_json: str, written: dict) -> str:
    """The golden state as today's code writes it: identical but for a length function's new fingerprint."""
    old = json.loads(old_json)
    length = old["spec"].get("packing", {}).get("length")
    if isinstance(length, str) and length not in ("index", "bytes"):
        new = written["spec"]["packing"]["length"]
        assert new["function"] == length and new["module"] == "golden" and len(new["lengths"]) == 16
        old["spec"]["packing"]["length"] = new
    content = written["spec"]["dataset"].get("content")
    if "content" not in old["spec"]["dataset"] and content is not None:
        assert len(content) == 16 and int(content, 16) >= 0
        old["spec"]["dataset"]["content"] = content
    bound = json.dumps([old["cursor"], old.get("pack"), old["spec"]], sort_keys=True, separators=(",", ":"))
    old["check"] = hashlib.blake2b(bound.encode(), digest_size=8).hexdigest()
    return json.dumps(old, sort_keys=True)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("golden")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_the_same_recipe_writes_the_same_state_bytes(entry, tmp):
    loader = build(entry["recipe"], tmp)
    it = iter(loader)
    for _ in range(entry["steps"]):
        next(it)
    if entry["next_batch"] is None:  # the recorded state was taken after the pass ended
        assert next(it, None) is None
    state = loader.state_dict()
    assert json.dumps(state, sort_keys=True) == today(entry["state"], state)
    loader.close()


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
@pytest.mark.parametrize("topology", [dict(world_size=2, micro_batch_size=2), dict(world_size=1, micro_batch_size=4)])
def test_an_old_state_restores_onto_the_same_continuation(entry, topology, tmp):
    state = json.loads(entry["state"])
    loader = build(entry["recipe"], tmp, **topology)
    loader.load_state_dict(state)
    now = loader.state_dict()
    assert json.dumps(now, sort_keys=True) == today(entry["state"], now)  # restored verbatim
    batch = next(iter(loader), None)
    expected = entry["next_batch"]
    if expected is None:
        assert batch is None
    elif topology["world_size"] == 2:
        assert plain(batch) == expected
    else:  # rank 0 of 1 rank with m=4 reads the old rank 0's two samples, then the old rank 1's
        got = plain(batch)
        for key, values in expected.items():
            assert got[key][: len(values)] == values, key
    loader.close()


@pytest.mark.parametrize("recipe", ["plain", "packed_bytes"])
def test_the_state_keys_are_written_in_the_order_of_0_1_0(recipe, tmp):
    """The golden file compares sorted keys; this pins the order itself (json.dump without sort_keys):
    0.1.0's keys, then the added ``check``."""
    loader = build(recipe, tmp)
    next(iter(loader))
    state = loader.state_dict()
    packed = recipe.startswith("packed")
    assert list(state) == ["format", "version", "cursor", "spec"] + (["pack"] if packed else []) + ["check"]
    assert list(state["spec"]) == ["seed", "shuffle", "global_batch_size", "dataset"] + (["packing"] if packed else [])
    if packed:
        assert list(state["spec"]["packing"]) == ["max_length", "window", "over_length", "length"]
    loader.close()


@pytest.mark.parametrize("entry", ENTRIES[:1] + [e for e in ENTRIES if e["recipe"] == "packed_bytes"][:1], ids=str)
def test_only_sequence_datasets_gain_a_content_digest_and_old_states_restore_with_a_warning(entry, tmp, caplog):
    loader = build(entry["recipe"], tmp)
    written = loader.state_dict()["spec"]["dataset"]
    assert ("content" in written) == (entry["recipe"] != "packed_bytes")
    with caplog.at_level("WARNING", logger="datareel"):
        loader.load_state_dict(json.loads(entry["state"]))
    assert ("predates content digests" in caplog.text) == (entry["recipe"] != "packed_bytes")
    loader.close()
