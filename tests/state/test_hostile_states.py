"""Hostile states and checkpoints given to ``Loader.load_state_dict``, ``datareel inspect`` and ``datareel
verify`` (issue 25, items 9, 10 and 14, and the world-size refusals).

- A DCP ``.metadata`` is unpickled with an allow-list of torch's own metadata classes: a crafted one runs
  nothing without ``--trusted``; real DCP checkpoints still read.
- Nothing a state names (a task encoder, a packing length function) is imported unless the operator says so
  (``--task-encoder``, or ``--trusted``).
- A state is bounded (size, depth, types, key set) and its check verified before anything in it is expanded,
  searched or recursed into; every malformed state is a :class:`datareel.DatareelError` naming the field.
  Work is bounded structurally (a count of the schedule pieces resolved), with a hang guard.
- A world size that does not fit is refused listing the world sizes that do.
"""

from __future__ import annotations

import json
import pickle
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datareel
from datareel import DatareelError, OptionError, Packing, RampUp, TopologyError, WindowedStage
from datareel.cli import main
from datareel.cli.inspect_state import describe_state, format_description, load_state_file
from datareel.cli.verify import verify_state
from datareel.plan import schedule as schedule_module
from datareel.plan.layout import Layout
from datareel.state import state_check
from hangs import bounded, must_return
from profiles import examples

PIECES = 10_000
"""The documented bound on the pieces a global batch size schedule resolves into."""


class Packer:
    """Online packing in a windowed stage: the state names this class."""

    def encode_sample(self, sample):
        yield sample

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples):
        return [s["__key__"] for s in samples]

    def batch(self, packs):
        return packs


class PackOnly:
    def pack_selected_samples(self, samples):
        return [s["__key__"] for s in samples]

    def batch(self, packs):
        return packs


LENGTHS = np.random.default_rng(3).integers(1, 6, 30)


def length_of(source, indices):
    return LENGTHS[indices]


def records(n=30, name="recs"):
    return datareel.from_sequence([{"__key__": f"r{i:03d}", "i": i} for i in range(n)], name=name)


def data(kind):
    if kind == "mixed":
        return datareel.mix([(records(30, "a"), 0.7), (records(20, "b"), 0.3)])
    return records()


KINDS = ["plain", "ramp", "anchored", "mixed", "packed", "windowed"]


def make(kind, **extra):
    """A loader of ``kind``; the same arguments rebuild the loader a state of it restores into."""
    options = dict(global_batch_size=12, micro_batch_size=2, world_size=2, rank=0, seed=4)
    if kind == "ramp":
        options["global_batch_size"] = RampUp(4, 4, 40, 12)
    if kind == "anchored":
        options["global_batch_size"] = [(0, 4), (3, 8)]
    if kind == "packed":
        options.update(packing=Packing(max_length=8, length=length_of, window=6), task_encoder=PackOnly())
    if kind == "windowed":
        options.update(task_encoder=Packer(), stage=WindowedStage(window=5, pack=True, background=False))
    return datareel.Loader(data(kind), **{**options, **extra})


_STATES: dict[str, dict] = {}


def state_of(kind):
    """A real state of ``kind`` a few micro-steps in (``anchored``: after a deliberate size change)."""
    if kind not in _STATES:
        loader = make(kind)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        loader.close()
        if kind == "anchored":  # restored with another schedule at a boundary: the state records the anchor
            other = make("plain", global_batch_size=[(0, 4), (3, 8)])
            plain = make("plain", global_batch_size=4)
            it = iter(plain)
            for _ in range(4):
                next(it)
            other.load_state_dict(plain.state_dict(), allow_batch_size_change=True)
            state = other.state_dict()
            assert isinstance(state["spec"]["global_batch_size"], dict) and "from" in state["spec"]["global_batch_size"]
        _STATES[kind] = state
    return json.loads(json.dumps(_STATES[kind]))


def resealed(state):
    """``state`` with its check recomputed: a hostile state can carry a valid check."""
    return {**state, "check": state_check(state)}


def jsonl(tmp_path, n=30):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(n)))
    assert main(["prepare", str(path)]) == 0
    return path


@pytest.fixture
def counted(monkeypatch):
    """Counts the schedule pieces resolved (every piece of every schedule is one ``_resolve`` yield); one
    resolution past the documented bound fails the test at once."""
    count = {"pieces": 0}
    original = schedule_module._resolve

    def counting(*args):
        for n, piece in enumerate(original(*args)):
            if n > PIECES:
                raise AssertionError("a schedule resolved into more pieces than the documented bound")
            count["pieces"] += 1
            yield piece

    monkeypatch.setattr(schedule_module, "_resolve", counting)
    return count


# -- item 9: a DCP checkpoint's .metadata --------------------------------------------------------------


class Payload:
    """Unpickling it creates ``marker`` (a stand-in for running any code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def real_dcp(path, **extra):
    import torch.distributed.checkpoint as dcp

    loader = make("plain")
    next(iter(loader))
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int8, torch.bool)
    content = {
        "loader": loader,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "tensors": {str(d): torch.ones(2, 2, dtype=d) for d in dtypes},
        "scalar": torch.tensor(3.0),
        "step": 7,
        "args": ["a", 1, (2, 3)],
        **extra,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(content, checkpoint_id=str(path))
    return loader.state_dict()


def crafted_metadata(tmp_path, how):
    """A DCP directory whose ``.metadata`` runs code when unpickled: alone, or inside real metadata."""
    directory, marker = tmp_path / f"dcp-{how}", tmp_path / f"RAN-{how}"
    if how == "alone":
        directory.mkdir()
        (directory / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    else:  # a real checkpoint whose metadata also carries the payload (in planner_data)
        real_dcp(directory)
        with open(directory / ".metadata", "rb") as f:
            metadata = _TorchUnpickler(f).load()
        metadata.planner_data["loader.cursor"] = Payload(marker)
        (directory / ".metadata").write_bytes(pickle.dumps(metadata))
    return directory, marker


class _TorchUnpickler(pickle.Unpickler):
    """The test's own reading of a metadata file it wrote itself."""


@pytest.mark.parametrize("how", ["alone", "inside real metadata"])
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_crafted_dcp_metadata_runs_nothing_without_trusted(tmp_path, capsys, how, command):
    directory, marker = crafted_metadata(tmp_path, how)
    data_file = jsonl(tmp_path)
    args = [command, str(directory)] + (
        [str(data_file), "--world-size", "1", "--micro-batch-size", "2"] if command == "verify" else []
    )
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert not marker.exists()  # refused before anything of the file ran
    assert ".metadata" in err and "--trusted" in err and "io.open" in err, err


def test_with_trusted_a_dcp_metadata_is_read_as_torch_reads_it(tmp_path, capsys):
    directory, marker = crafted_metadata(tmp_path, "inside real metadata")
    main(["inspect", str(directory), "--trusted"])  # the operator vouches for the file: torch's own reader
    assert marker.exists()


def test_real_dcp_checkpoints_still_read(tmp_path, capsys):
    state = real_dcp(tmp_path / "ckpt")
    found, key = load_state_file(tmp_path / "ckpt")
    assert key == "loader" and found == state
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "ckpt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cursor"] == state["cursor"]


def test_a_dcp_metadata_that_would_expand_or_escape_is_refused(tmp_path):
    """Structures of allowed classes that would allocate without bound or read outside the directory."""
    from torch.distributed.checkpoint.metadata import TensorProperties, TensorStorageMetadata

    real_dcp(tmp_path / "base")
    with open(tmp_path / "base" / ".metadata", "rb") as f:
        original = f.read()
    cases = {
        "a list index of a billion": lambda m: m.planner_data.__setitem__("loader.format", ("loader", 10**9)),
        "a path out of the directory": lambda m: [
            setattr(info, "relative_path", "../../elsewhere") for info in m.storage_data.values()
        ],
        "a terabyte tensor under a plain key": lambda m: (
            m.state_dict_metadata.__setitem__(
                "loader.big", TensorStorageMetadata(TensorProperties(torch.float32), torch.Size([1 << 40]), [])
            ),
            m.planner_data.__setitem__("loader.big", ("loader.format", "big")),
        ),
    }
    for name, change in cases.items():
        directory = tmp_path / name.replace(" ", "-")
        directory.mkdir()
        for part in (tmp_path / "base").iterdir():
            (directory / part.name).write_bytes(part.read_bytes())
        metadata = _TorchUnpickler(__import__("io").BytesIO(original)).load()
        change(metadata)
        (directory / ".metadata").write_bytes(pickle.dumps(metadata))
        with bounded():
            try:
                state, _ = load_state_file(directory)
            except DatareelError as exc:
                assert str(directory) in str(exc), name
            else:  # read: only plain entries, and nothing outside the directory
                assert "big" not in state, name


# -- item 10: code a state names --------------------------------------------------------------------

MODULE = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED-{name}").write_text("imported")


class Packer:
    def encode_sample(self, sample):
        yield sample

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples):
        return [s["__key__"] for s in samples]

    def batch(self, packs):
        return packs


def length_of(source, indices):
    import numpy as np

    return np.asarray(indices) % 5 + 1
"""


def length_like_the_module(source, indices):
    return np.asarray(indices) % 5 + 1


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    """A job directory (the cwd) holding a module that leaves a marker when imported."""
    (tmp_path / "job_code.py").write_text(MODULE.format(name="job_code"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "job_code", raising=False)
    return tmp_path


def named_state(tmp_path, what):
    """A real state of a job on the JSONL file, its spec naming ``job_code``'s class or function."""
    source = datareel.open_dataset(jsonl(tmp_path))
    common = dict(global_batch_size=4, micro_batch_size=2, world_size=1, rank=0, seed=2)
    if what == "encoder":
        job = datareel.Loader(source, task_encoder=Packer(), stage=WindowedStage(window=5, pack=True), **common)
    else:
        packing = Packing(max_length=8, length=length_like_the_module, window=6)
        job = datareel.Loader(source, packing=packing, task_encoder=PackOnly(), **common)
    it = iter(job)
    for _ in range(3):
        next(it)
    state = job.state_dict()
    job.close()
    if what == "encoder":
        state["spec"]["stage"]["encoder"] = "job_code.Packer"
    else:
        state["spec"]["packing"]["length"].update(module="job_code", function="length_of")
    path = tmp_path / f"state-{what}.json"
    path.write_text(json.dumps(resealed(state)))
    return path


def forget(job_dir):
    sys.modules.pop("job_code", None)
    (job_dir / "IMPORTED-job_code").unlink(missing_ok=True)


@pytest.mark.parametrize("what", [pytest.param("encoder", marks=pytest.mark.workers), "length function"])
def test_inspect_imports_nothing_a_state_names_unless_told(job_dir, capsys, what):
    state = named_state(job_dir, what)
    marker = job_dir / "IMPORTED-job_code"
    capsys.readouterr()
    assert main(["inspect", str(state)]) == 0  # without the dataset nothing is rebuilt
    assert main(["inspect", str(state), "--dataset", "docs.jsonl"]) == 1
    err = capsys.readouterr().err
    assert not marker.exists() and "job_code" in err and "--trusted" in err, err
    if what == "encoder":
        assert "--task-encoder" in err
        assert main(["inspect", str(state), "--dataset", "docs.jsonl", "--task-encoder", "job_code:Packer"]) == 0
        assert marker.exists()  # named by the operator: imported
        forget(job_dir)
        capsys.readouterr()
    assert main(["inspect", str(state), "--dataset", "docs.jsonl", "--trusted", "--json"]) == 0
    assert marker.exists() and json.loads(capsys.readouterr().out)["per_source"]["sources"]


@pytest.mark.parametrize("what", [pytest.param("encoder", marks=pytest.mark.workers), "length function"])
def test_verify_imports_nothing_a_state_names_unless_told(job_dir, capsys, what):
    state = named_state(job_dir, what)
    marker = job_dir / "IMPORTED-job_code"
    topology = ["--world-size", "1", "--micro-batch-size", "2"]
    capsys.readouterr()
    assert main(["verify", str(state), "docs.jsonl", *topology]) == 1
    err = capsys.readouterr().err
    assert not marker.exists() and "job_code" in err and "--trusted" in err, err
    if what == "encoder":
        assert main(["verify", str(state), "docs.jsonl", *topology, "--task-encoder", "job_code:Packer"]) == 0
        assert marker.exists()
        forget(job_dir)
    assert main(["verify", str(state), "docs.jsonl", *topology, "--trusted"]) == 0
    assert marker.exists() and capsys.readouterr().out.startswith("OK")
    with pytest.raises(DatareelError, match="trusted"):  # the Python API asks the same consent
        forget(job_dir)
        verify_state(json.loads(state.read_text()), datareel.open_dataset("docs.jsonl"), world_size=1,
                     micro_batch_size=2)  # fmt: skip
    assert not marker.exists()


# -- item 14: hostile states are bounded and refused by name -----------------------------------------


def test_a_ramp_up_of_a_billion_sizes_is_refused_before_anything_resolves(counted):
    with must_return(20):
        with pytest.raises(OptionError, match="10,000"):
            RampUp(1, 1, 10**15, 10**9 + 1)
        with pytest.raises(OptionError, match="10,000"):
            datareel.Loader(records(), global_batch_size=[(b, b + 1) for b in range(PIECES + 1)], micro_batch_size=1)
        state = state_of("plain")
        state["spec"]["global_batch_size"] = {"ramp_up": [1, 1, 10**15, 10**9 + 1]}
        for hostile, message in ((state, "check"), (resealed(state), "10,000")):  # a stale check, a valid one
            with pytest.raises(DatareelError, match=message):
                make("plain").load_state_dict(hostile)
            for call in (describe_state, lambda s: verify_state(s, data("plain"), world_size=1, micro_batch_size=1)):
                try:
                    verdict = call(hostile)
                except DatareelError as exc:
                    assert "global_batch_size" in str(exc) or "check" in str(exc)
                else:
                    assert verdict.get("ok") is False
    assert counted["pieces"] < 100  # the loaders' own schedules only: the hostile one never resolved


def test_a_stale_check_is_refused_before_the_schedule_is_read(counted):
    state = state_of("ramp")
    state["spec"]["global_batch_size"] = {"ramp_up": [1, 1, 2**62, 9_001]}  # within the bound, but slow
    loader = make("ramp")
    before = counted["pieces"]
    with must_return(20), pytest.raises(datareel.StateMismatchError, match="check"):
        loader.load_state_dict(state)
    assert counted["pieces"] == before


def test_a_ramp_up_with_huge_samples_resolves_in_steps_of_its_sizes(counted):
    """Float estimates far from the exact change point (samples near 2**62) are searched, not walked."""
    with must_return(30):
        schedule = schedule_module.BatchSchedule(RampUp(1, 1, 2**62, 10_000))
    assert counted["pieces"] == len(schedule.sizes) <= PIECES
    rule = schedule.rule
    for i in range(1, len(schedule.sizes), 97):  # every change lies where Megatron's rule changes
        b, p = schedule.batches[i], schedule.positions[i]
        before = p - schedule.sizes[i - 1]  # where the last batch of the previous size began
        assert rule.size_after(p) == schedule.sizes[i] and rule.size_after(before) == schedule.sizes[i - 1], b


def test_inspect_of_a_huge_global_batch_lists_bounded_topologies(tmp_path, capsys):
    loader = datareel.Loader(records(), global_batch_size=2**62, micro_batch_size=2, world_size=1)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(loader.state_dict()))
    with must_return(20):
        described = describe_state(load_state_file(path)[0])
        text = format_description(described)
    pairs = described["resume"]["pairs"]
    assert [1, 1] in pairs and [2**12, 2**12] in pairs and len(pairs) <= 10_000
    assert all(w <= 4096 and m <= 4096 and 2**62 % (w * m) == 0 for w, m in pairs)
    assert "world_size  4096" in text or "more world sizes" in text


def test_verify_of_a_huge_global_batch_lists_a_bounded_number_of_keys():
    state = datareel.Loader(records(), global_batch_size=2**40, micro_batch_size=1, world_size=1).state_dict()
    with must_return(30):
        verdict = verify_state(state, records(), world_size=2, micro_batch_size=4, show=2)
    assert verdict["ok"] and verdict["truncated"]
    assert sum(len(keys) for batch in verdict["next"] for keys in batch["ranks"]) <= 100_000


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, '{"a": ' * 50_000 + "1" + "}" * 50_000, '{"format": "datareel.loader", "x": '
     + "[" * 900 + "]" * 900 + "}"],
)  # fmt: skip
def test_a_deeply_nested_file_is_a_named_error(tmp_path, capsys, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    with must_return(20):
        assert main(["inspect", str(path)]) == 1
        assert main(["verify", str(path), str(jsonl(tmp_path)), "--world-size", "1", "--micro-batch-size", "1"]) == 1
    assert str(path) in capsys.readouterr().err


def test_a_deeply_nested_torch_file_is_a_named_error(tmp_path, capsys):
    blob = b"\x80\x02" + b"]" * 20_000 + b"a" * 19_999 + b"."  # [[[...]]] 20,000 deep, opcode by opcode
    path = tmp_path / "deep.pt"
    torch.save({"x": 1}, path)
    import zipfile

    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        members = {n: z.read(n) for n in names}
    data_name = next(n for n in names if n.endswith("data.pkl"))
    members[data_name] = blob
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n in names:
            z.writestr(n, members[n])
    with must_return(20):
        assert main(["inspect", str(path)]) == 1
    assert str(path) in capsys.readouterr().err


# -- the fuzz ---------------------------------------------------------------------------------------


def _deep(levels, kind):
    out = 1
    for _ in range(levels):
        out = [out] if kind == "list" else {"k": out}
    return out


HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            1,
            -1,
            2,
            7,
            2**31,
            2**63 - 1,
            2**63,
            2**64,
            -(2**63) - 1,
            10**30,
            10**400,
            10**5000,
            float("nan"),
            float("inf"),
            -float("inf"),
            1.5,
            -0.0,
            1e308,
            "",
            "x" * 100_000,
            "0123456789abcdef",
            [],
            {},
            [0] * 100_000,
            list(range(5)),
            {"a": 1},
            (1, 2),
            b"bytes",
            {1: 2},
            {(1, 2): 3},
            object(),
        ]
    ),  # fmt: skip
    st.builds(_deep, st.sampled_from([20, 2000, 20_000]), st.sampled_from(["list", "dict"])),
    st.sampled_from(
        [
            {"ramp_up": [1, 1, 10**15, 10**9 + 1]},
            {"ramp_up": [1, 1, 2**62, 2**62]},
            {"ramp_up": [4, 4, 40, 12]},
            {"ramp_up": [1, 1, 2**62, 9_001]},
            {"pieces": [[b, b + 1] for b in range(PIECES + 5)]},
            {"pieces": [[0, 4], [3, 8]]},
            {"pieces": [[0, 2**62], [10**6, 1]]},
            {"from": [10**18, 2**63 - 1], "rule": 4},
            {"from": [0, 0], "rule": {"ramp_up": [1, 1, 10**15, 10**9 + 1]}},
            {"from": [1, 2, 3], "rule": 4},
            {"from": [2**70, 0], "rule": 4},
            {"ramp_up": "1,1,1,1"},
            {"pieces": [[0, 4]] * 3},
            {"x": 1},
            [0, 0],
            [[0, 4], [1, 0]],
            {"function": "os.system", "module": "os", "lengths": "0" * 16},
        ]
    ),  # fmt: skip
    st.integers(),
    st.text(max_size=12),
    st.lists(st.integers(-3, 10**6), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(0, 5), max_size=3),
)


def _paths(node, prefix=()):
    """Every (path, value) in a JSON tree, the root included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _mutated(state, path, action, value):
    if not path:
        return value if action == "replace" else state
    parent = state
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "delete":
        parent.pop(last)
    elif action == "extra" and isinstance(parent, dict):
        parent[f"extra_{len(parent)}"] = value
    else:
        parent.append(value)
    return state


def _accepts_or_refuses(call):
    try:
        return call()
    except DatareelError as exc:
        assert str(exc)
        return None


@settings(
    max_examples=examples(1.2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(kind=st.sampled_from(KINDS), data_=st.data())
def test_a_mutated_state_is_accepted_or_refused_by_name(kind, data_, counted, tmp_path_factory):
    state = state_of(kind)
    paths = [p for p, _ in _paths(state)]
    path = data_.draw(st.sampled_from(paths), label="path")
    action = data_.draw(st.sampled_from(["replace", "replace", "replace", "delete", "extra"]), label="action")
    value = data_.draw(HOSTILE, label="value")
    mutated = _mutated(state, path, action, value)
    if data_.draw(st.booleans(), label="reseal") and isinstance(mutated, dict):
        try:
            mutated = resealed(mutated)
        except (TypeError, ValueError, RecursionError):
            pass  # not JSON: its check cannot be recomputed
    before = counted["pieces"]
    with bounded():
        loader = make(kind)
        try:
            _accepts_or_refuses(lambda: loader.load_state_dict(mutated))
        finally:
            loader.close()
        described = _accepts_or_refuses(lambda: describe_state(mutated))
        if described is not None:
            format_description(described)
        verdict = _accepts_or_refuses(
            lambda: verify_state(mutated, data(kind), world_size=1, micro_batch_size=2, trusted=True)
        )
        assert verdict is None or isinstance(verdict["ok"], bool)
        try:
            text = json.dumps(mutated)
        except (TypeError, ValueError, RecursionError):
            text = None
        if text is not None:  # the CLI: an exit code and a message, never a traceback
            path_ = tmp_path_factory.mktemp("state") / "state.json"
            path_.write_text(text)
            assert main(["inspect", str(path_)]) in (0, 1)
    assert counted["pieces"] - before <= 10 * (PIECES + 1)  # a few resolutions, each within the bound


def test_the_fuzz_starts_from_states_that_restore():
    for kind in KINDS:
        loader = make(kind)
        loader.load_state_dict(state_of(kind))
        assert describe_state(state_of(kind))["check"] == "ok"
        assert verify_state(state_of(kind), data(kind), world_size=1, micro_batch_size=2, trusted=True)["ok"]
        loader.close()


def test_a_malformed_field_is_named():
    cases = [
        (("spec", "dataset", "sources", 0, 0), ["a"], "spec.dataset.sources"),
        (("spec", "dataset", "size"), "30", "spec.dataset.size"),
        (("spec", "seed"), 2**70, "spec.seed"),
        (("spec", "shuffle"), "yes", "spec.shuffle"),
        (("spec", "packing", "window"), -1, "spec.packing.window"),
        (("pack",), "ab", "pack"),
        (("check",), 12, "check"),
    ]
    for path, value, field in cases:
        kind = "packed" if "pack" in path[0] or "packing" in path else "mixed"
        state = _mutated(state_of(kind), path, "replace", value)
        state = resealed(state) if path != ("check",) else state
        for call in (make(kind).load_state_dict, describe_state):
            with pytest.raises(DatareelError, match=field.replace(".", r"\.")):
                call(state)
    state = state_of("plain")
    state["spec"]["dataset"]["name"] = _deep(5000, "list")
    with pytest.raises(DatareelError, match="nested deeper than"):
        make("plain").load_state_dict(state)
    state = {**state_of("plain"), "unexpected": 1}
    with pytest.raises(DatareelError, match="unexpected"):
        make("plain").load_state_dict(resealed(state))


# -- world sizes that do not fit --------------------------------------------------------------------


def test_a_world_size_that_does_not_fit_lists_those_that_do():
    with pytest.raises(TopologyError) as refused:
        Layout(global_batch_size=12, micro_batch_size=2, world_size=5)
    assert "world_size values that work with micro_batch_size=2: 1, 2, 3, 6" in str(refused.value)
    with pytest.raises(TopologyError) as refused:
        Layout(global_batch_size=12, micro_batch_size=4, world_size=2)  # 2 divides 12, 8 does not
    message = str(refused.value)
    assert "world_size values that work with micro_batch_size=4: 1, 3" in message
    assert "micro_batch_size values that work with world_size=2: 1, 2, 3, 6" in message
    with pytest.raises(TopologyError) as refused:
        Layout(global_batch_size=12, micro_batch_size=5, world_size=2)
    assert "no world_size works with micro_batch_size=5" in str(refused.value)
    with pytest.raises(TopologyError) as refused:
        Layout(global_batch_size=2**62, micro_batch_size=3, world_size=2)
    assert "no world_size works with micro_batch_size=3" in str(refused.value)
    with pytest.raises(TopologyError) as refused:
        Layout(global_batch_size=2**62, micro_batch_size=1, world_size=3)
    assert "world_size values that work with micro_batch_size=1: 1, 2, 4, 8," in str(refused.value)
    assert str(refused.value).endswith(", ...") or "..." in str(refused.value)


def test_a_restore_that_does_not_fit_lists_the_world_sizes_that_divide_the_rest():
    saving = datareel.Loader(records(), global_batch_size=12, micro_batch_size=2, world_size=3, rank=0)
    it = iter(saving)
    next(it)  # 6 into global batch 0: the rest is 6
    state = saving.state_dict()
    with pytest.raises(TopologyError) as refused:
        datareel.Loader(records(), global_batch_size=12, micro_batch_size=2, world_size=2, rank=0).load_state_dict(
            state
        )
    assert "world_size values that work with micro_batch_size=2 here: 1, 3" in str(refused.value)
    with pytest.raises(TopologyError) as refused:
        datareel.Loader(records(), global_batch_size=12, micro_batch_size=4, world_size=1).load_state_dict(state)
    assert "no world_size works with micro_batch_size=4 here" in str(refused.value)
    layout = Layout(global_batch_size=[(0, 12), (1, 8)], micro_batch_size=4, world_size=2)
    with pytest.raises(TopologyError) as refused:
        layout.check_sizes(0)  # 8 does not divide 12: the sizes' common divisor is 4
    assert "world_size values that work with micro_batch_size=4 here: 1" in str(refused.value)
    assert "micro_batch_size values that work with world_size=2: 1, 2" in str(refused.value)
