"""The facade's utility modules beside megatron.energon's: ``sample_utils`` (the same text on the same
samples), ``fork_hook`` (weak registries and fork-time calls), ``flavors.webdataset.indexing`` (the sqlite
index writer, read back by Energon's own reader) and ``flavors.webdataset.aggregator_pool``."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

from datareel.energon import fork_hook, sample_utils
from datareel.energon.flavors.webdataset.aggregator_pool import AggregatorPool, BaseAggregator
from datareel.energon.flavors.webdataset.indexing import DuplicateSampleKeyError, SqliteIndexWriter
from datareel.energon.flavors.webdataset.prepare import IndexMediaMetadata, IndexSample, IndexSamplePart
from datareel.errors import DatareelError, DatasetError, OptionError

# ---------------------------------------------------------------- sample_utils


@dataclasses.dataclass
class _Inner:
    n: int
    tags: tuple[str, ...]


@dataclasses.dataclass
class _Outer:
    inner: _Inner
    items: list[_Inner]
    blob: bytes


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque " + "x" * 300 + ">"


def _samples() -> list[object]:
    """Inputs that reach every branch of the formatters (limits included)."""
    return [
        {"a": 1, "b": [1, 2.5, "s", None, True], "__key__": "k0", "t": (1, (2, 3))},
        {"tensor": torch.arange(10, dtype=torch.int32).reshape(2, 5), "bools": torch.tensor([True, False])},
        {"empty_t": torch.zeros(0), "complex_t": torch.tensor([1 + 2j]), "half": torch.tensor([0.5, 1.5]).half()},
        {"array": np.linspace(0, 1, 7), "empty_a": np.zeros((0, 3)), "strs": np.array(["a", "b"])},
        {"objs": np.array([object()], dtype=object)[:0]},
        _Outer(_Inner(1, ("x", "y")), [_Inner(2, ())], b"\x00\x01"),
        {i: i for i in range(30)},
        list(range(15)),
        {(1, 2): "tuple key", 3.5: "float key", None: "none key"},
        {"long": "y" * 1200, "multi": "a\nb", "opaque": _Opaque()},
        "top-level string",
        42,
        None,
        [],
        {},
        {"deep": {"a": {"b": {"c": {"d": [1, [2, [3]]]}}}}},
        [{"__keys__": ["a", "b"], "x": "z" * 80}],
    ]


@pytest.mark.parametrize("index", range(len(_samples())))
def test_format_sample_detailed_matches_energon(index: int) -> None:
    from megatron.energon.sample_utils import format_sample_detailed as energon_detailed

    sample = _samples()[index]
    assert sample_utils.format_sample_detailed(sample) == energon_detailed(sample)
    assert sample_utils.format_sample_detailed(sample, indent="  ") == energon_detailed(sample, indent="  ")


@pytest.mark.parametrize("index", range(len(_samples())))
@pytest.mark.parametrize("limits", [{}, {"depth": 1, "max_items": 2, "max_str_len": 5}, {"depth": 0}])
def test_format_sample_compact_matches_energon(index: int, limits: dict[str, int]) -> None:
    from megatron.energon.sample_utils import format_sample_compact as energon_compact

    sample = _samples()[index]
    assert sample_utils.format_sample_compact(sample, **limits) == energon_compact(sample, **limits)


def test_format_sample_detailed_pins_summaries() -> None:
    """Fixed output, independent of Energon: a long tensor shows its ends; a lone scalar has no '...' marker."""
    text = sample_utils.format_sample_detailed({"t": torch.arange(8)}, indent="> ")
    assert text == (
        "> t: Tensor(shape=torch.Size([8]), dtype=torch.int64, device=cpu, min=0, max=7, "
        "values=[0, 1, 2, ..., 5, 6, 7])"
    )
    assert sample_utils.format_sample_detailed(5) == "5"
    assert sample_utils.format_sample_detailed(_Inner).startswith("<class ")  # a class, not an instance


@dataclasses.dataclass
class _Keyed:
    __key__: list[str]


_KEY_BATCHES: list[object] = [
    {"__key__": ["a", "b"]},
    {"__keys__": ["a"], "__key__": [1]},
    {"keys": ["k"]},
    {"keys": [1, 2]},
    [{"__key__": ["first"]}, {"__key__": ["second"]}],
    _Keyed(["x", "y"]),
    _Keyed([1]),  # type: ignore[list-item]
    {"other": 1},
    None,
]


@pytest.mark.parametrize("index", range(len(_KEY_BATCHES)))
def test_default_get_batch_keys_matches_energon(index: int) -> None:
    from megatron.energon.sample_utils import default_get_batch_keys as energon_keys

    batch = _KEY_BATCHES[index]
    assert sample_utils.default_get_batch_keys(batch) == energon_keys(batch)


def test_default_get_batch_keys_where_datareel_differs() -> None:
    assert sample_utils.default_get_batch_keys([]) is None  # Energon: IndexError
    assert sample_utils.default_get_batch_keys({"__key__": "abc"}) is None  # Energon: the string itself
    assert sample_utils.default_get_batch_keys({"__key__": 5}) is None  # Energon: TypeError


# ---------------------------------------------------------------- fork_hook


class _Counter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def one(self, *args: object) -> None:
        self.calls.append(f"one{args}")

    def two(self, *args: object) -> None:
        self.calls.append("two")


class _Empty(list):  # a false-valued owner
    def hook(self) -> None:
        self.append("called")


def test_weak_callbacks_hold_methods_by_their_object() -> None:
    registry = fork_hook.WeakCallbacks()
    counter = _Counter()
    registry.add_hook(counter.one)
    registry.add_hook(counter.two)  # a second method of one object is kept too
    registry.add_hook(counter.one)  # the same method again replaces its entry
    registry.run("x")
    assert counter.calls == ["one('x',)", "two"]  # in the order first added, with run's arguments
    assert len(registry._hooks) == 2
    del counter
    gc.collect()
    assert registry._hooks == {}


def test_weak_callbacks_keep_a_method_of_a_false_valued_object() -> None:
    registry = fork_hook.WeakCallbacks()
    owner = _Empty()
    registry.add_hook(owner.hook)
    registry.run()
    registry.run()
    assert owner == ["called", "called"]


def test_weak_callbacks_persistent_and_refused() -> None:
    registry = fork_hook.WeakCallbacks()
    seen: list[int] = []
    registry.add_hook(lambda: seen.append(1), make_persistent=True)
    gc.collect()
    registry.run()
    assert seen == [1]
    with pytest.raises(OptionError, match="make_persistent=True"):
        registry.add_hook(seen.append)  # a temporary built-in bound method: it would vanish at once
    registry.add_hook(seen.clear, make_persistent=True)
    registry.add_hook(os.getpid)  # a module's built-in function lives on: held weakly is fine
    registry.run()
    assert seen == []


class _Hooked(fork_hook.ForkMixin):
    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value
        self.before = 0

    def __before_fork__(self) -> None:
        self.before += 1


@dataclasses.dataclass
class _HookedDc(fork_hook.DataclassForkMixin):
    log: list[str] = dataclasses.field(default_factory=list)

    def __after_in_parent_fork__(self) -> None:
        self.log.append("parent")

    def __after_in_child_fork__(self) -> None:
        self.log.append("child")


def test_fork_mixins_register_only_overridden_hooks() -> None:
    sizes = [len(r._hooks) for r in (fork_hook._before_fork_hooks, fork_hook._after_in_parent_fork_hooks)]
    child_size = len(fork_hook._after_in_child_fork_hooks._hooks)
    hooked, dc = _Hooked(3), _HookedDc()
    assert len(fork_hook._before_fork_hooks._hooks) == sizes[0] + 1  # _Hooked overrides only __before_fork__
    assert len(fork_hook._after_in_parent_fork_hooks._hooks) == sizes[1] + 1  # _HookedDc: parent and child
    assert len(fork_hook._after_in_child_fork_hooks._hooks) == child_size + 1
    assert hooked.value == 3 and dc.log == []
    del hooked, dc
    gc.collect()
    assert len(fork_hook._before_fork_hooks._hooks) == sizes[0]
    assert len(fork_hook._after_in_child_fork_hooks._hooks) == child_size


@pytest.mark.workers
def test_fork_hooks_run_around_os_fork() -> None:
    hooked, dc = _Hooked(1), _HookedDc()
    child_calls: list[str] = []

    def in_child() -> None:
        child_calls.append("fn")

    fork_hook.after_in_child_fork_hook(in_child)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if every hook ran here as it should
        ok = hooked.before == 1 and dc.log == ["child"] and child_calls == ["fn"]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert hooked.before == 1 and dc.log == ["parent"] and child_calls == []


# ---------------------------------------------------------------- indexing


def _sample(tar: int, key: str, index: int) -> IndexSample:
    return IndexSample(tar_file_id=tar, sample_key=key, sample_index=index, byte_offset=index * 1024, byte_size=1024)


def test_sqlite_index_writer_reads_back_in_energon(tmp_path: Path) -> None:
    from megatron.energon.epathlib import EPath as EnergonPath
    from megatron.energon.flavors.webdataset.indexing import SqliteIndexReader

    path = tmp_path / "meta" / "index.sqlite"
    with SqliteIndexWriter(str(path)) as writer:
        writer.append_samples([_sample(1, "b", 0), _sample(0, "a", 0)])  # rows name their shard: any order
        writer.append_parts([IndexSamplePart(0, 0, "txt", 512, 3), IndexSamplePart(1, 0, "jpg", 1536, 9)])
    reader = SqliteIndexReader(EnergonPath(path))
    try:
        assert reader.get_sample_count() == 2
        assert list(reader.list_sample_parts("b")) == [("jpg", 9, 1)]
        pointer = reader.get_sample_pointer_by_key("a")
        assert (pointer.tar_file_id, pointer.byte_offset, pointer.byte_size) == (0, 0, 1024)
    finally:
        reader.close()


def test_sqlite_index_writer_schema_matches_energon(tmp_path: Path) -> None:
    from megatron.energon.epathlib import EPath as EnergonPath
    from megatron.energon.flavors.webdataset.indexing import SqliteIndexWriter as EnergonWriter

    def shape(path: Path) -> dict[tuple[str, str], list[tuple[object, ...]]]:
        """Each table's (column, type) and each index's columns, the automatic ones (UNIQUE, PRIMARY KEY) too."""
        db = sqlite3.connect(path)
        try:
            found = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index')").fetchall()
            pragma = {"table": "table_info", "index": "index_info"}
            return {
                (kind, name): [(c[1], c[2]) for c in db.execute(f"PRAGMA {pragma[kind]}({name})")]
                for kind, name in found
            }
        finally:
            db.close()

    with SqliteIndexWriter(tmp_path / "ours.sqlite", enable_media_metadata=True):
        pass
    with EnergonWriter(EnergonPath(tmp_path / "energon.sqlite"), enable_media_metadata=True):
        pass
    ours = shape(tmp_path / "ours.sqlite")
    assert ("index", "idx_sample_parts_full") in ours and ("index", "sqlite_autoindex_samples_1") in ours
    assert ours == shape(tmp_path / "energon.sqlite")


def test_sqlite_index_writer_refuses_a_batch_with_a_known_key(tmp_path: Path) -> None:
    with SqliteIndexWriter(tmp_path / "index.sqlite") as writer:
        writer.append_samples([_sample(0, "a", 0)])
        with pytest.raises(DuplicateSampleKeyError) as raised:
            writer.append_samples(iter([_sample(1, "b", 0), _sample(1, "a", 1)]))  # any iterable
        assert writer.db is not None
        assert writer.db.execute("SELECT sample_key FROM samples").fetchall() == [("a",)]  # the batch is out
    error = raised.value
    assert (error.sample_key, error.first, error.second) == ("a", (0, 0), (1, 1))
    assert isinstance(error, DatasetError) and isinstance(error, RuntimeError)
    assert "sample 0 of tar file 0 and sample 1 of tar file 1" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.sample_key, copy.first, copy.second, str(copy)) == ("a", (0, 0), (1, 1), str(error))


def test_sqlite_index_writer_media_tables_and_misuse(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    with SqliteIndexWriter(path, enable_media_metadata=True) as writer:
        writer.append_media_metadata_batch([IndexMediaMetadata("a.jpg", "image", "{}")])
        writer.append_media_filter(strategy="EXTENSION", patterns=None)
    with SqliteIndexWriter(path, enable_sample_tables=False, enable_media_metadata=True, reset_tables=False) as w:
        w.append_media_metadata_batch([IndexMediaMetadata("a.jpg", "image", '{"w": 1}')])  # replaces the row
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT * FROM media_metadata").fetchall() == [("a.jpg", "image", '{"w": 1}')]
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone() == (0,)  # sample tables left as they were
    finally:
        db.close()
    writer = SqliteIndexWriter(path)
    with pytest.raises(OptionError, match="enable_media_metadata=True"):
        writer.append_media_metadata_batch([])
    writer.close()
    writer.close()  # a second close does nothing
    with pytest.raises(OptionError, match="closed"):
        writer.append_samples([_sample(0, "a", 0)])
    with pytest.raises(OptionError, match="reset_tables=True"):
        SqliteIndexWriter(path, reset_tables=False)
    with pytest.raises(OptionError, match="not a local file"):
        SqliteIndexWriter("s3://bucket/index.sqlite")


# ---------------------------------------------------------------- aggregator_pool


def _produce(task: list[int]) -> list[int]:
    return list(task)


def _produce_or_fail(task: list[int]):  # type: ignore[no-untyped-def]
    for v in task:
        if v < 0:
            raise ValueError(f"negative item {v}")
        if v == 99:
            os._exit(3)
        yield v


class _Collect(BaseAggregator[int, list[list[int]]]):
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.events: list[str] = []

    def on_start(self, aggregator_pool: AggregatorPool) -> None:
        self.events.append("start")

    def on_item(self, items: list[int], aggregator_pool: AggregatorPool) -> None:
        self.batches.append(list(items))

    def on_finish(self, aggregator_pool: AggregatorPool) -> None:
        self.events.append("finish")

    def get_final_result_data(self) -> list[list[int]]:
        return self.batches


def test_aggregator_pool_refuses_bad_arguments() -> None:
    with pytest.raises(OptionError, match="num_workers=0"):
        AggregatorPool(0, _produce, _Collect())
    with pytest.raises(OptionError, match="batch_size=0"):
        AggregatorPool(1, _produce, _Collect(), batch_size=0)
    with pytest.raises(OptionError, match="None"):
        AggregatorPool(1, _produce, _Collect()).submit_task(None)


@pytest.mark.workers
def test_aggregator_pool_batches_as_energon() -> None:
    from megatron.energon.flavors.webdataset.aggregator_pool import AggregatorPool as EnergonPool

    tasks = [[1, 2, 3, 4, 5], [], [6], [7, 8, 9, 10]]
    results = []
    for pool_type in (AggregatorPool, EnergonPool):
        pool = pool_type(1, _produce, _Collect(), batch_size=3)
        for task in tasks:
            pool.submit_task(task)
        results.append(pool.process())
    assert results[0] == results[1] == [[1, 2, 3], [4, 5], [6], [7, 8, 9], [10]]

    aggregator = _Collect()
    pool = AggregatorPool(2, _produce, aggregator, batch_size=2)
    for task in tasks:
        pool.submit_task(task)
    batches = pool.process()
    assert sorted(v for batch in batches for v in batch) == list(range(1, 11))
    assert aggregator.events == ["start", "finish"]


@pytest.mark.workers
@pytest.mark.parametrize(
    ("task", "message"), [([1, -2], "failed on task \\[1, -2\\].*ValueError: negative item -2"), ([99], "exit code 3")]
)
def test_aggregator_pool_names_a_failed_or_dead_worker(
    task: list[int], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("datareel.energon.flavors.webdataset.aggregator_pool.POLL_S", 0.05)
    pool = AggregatorPool(2, _produce_or_fail, _Collect())
    pool.submit_task(task)
    with pytest.raises(DatareelError, match=f"(?s){message}"):
        pool.process()
