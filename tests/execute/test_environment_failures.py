"""Failures of the environment are not failures of a sample (issue 25, items 6 and 15).

Only a failure that is a property of the sample (its bytes, its decoding, the encoder on its content)
may be substituted (``on_error="substitute"``, the Energon facade's mode whenever a ``handler`` is
given) or handed to the error handler. Too many open files, I/O errors, a full disk, refused or
timed-out connections, retries run out, a listed shard gone missing: those stop the run with a
:class:`~datareel.errors.StorageError` naming the file and the fix, and nothing is substituted.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.error import URLError

import pytest

import datareel
from datareel import energon as den
from datareel.cli.prepare import prepare_jsonl, prepare_webdataset
from datareel.errors import BatchError, DatasetChangedError, DatasetError, StorageError, sample_failure
from wds_helpers import build_shards, write_shard
from where import HELPERS

HERE = HELPERS  # fd_limit_reader.py
SHARDS, PER_SHARD = 72, 2


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """72 shards of 2 samples: more shards than the lowered limits below allow open at once."""
    root = tmp_path_factory.mktemp("many")
    for s in range(SHARDS):
        write_shard(root / f"p-{s:03d}.tar", [(f"k{s:03d}-{i}", {"txt": b"x"}) for i in range(PER_SHARD)])
    prepare_webdataset(root, progress=False)
    return root


def read_under_limit(root: Path, **args) -> dict:
    """One pass over ``root`` in a process of its own under ``ulimit -n`` = ``limit`` (tests/fd_limit_reader.py)."""
    env = {k: v for k, v in os.environ.items() if k != "DATAREEL_MAX_OPEN_SHARDS"}
    env.update(args.pop("env", {}))
    proc = subprocess.run(
        [sys.executable, str(HERE / "fd_limit_reader.py"), json.dumps({"root": str(root), **args})],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=HERE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def every_key_once(result: dict) -> bool:
    counts = collections.Counter(result["keys"])
    return len(counts) == SHARDS * PER_SHARD and set(counts.values()) == {1}


# -- the open-shard cap follows ulimit -n (item 15) ---------------------------------------------------


@pytest.mark.slow  # a process of its own
@pytest.mark.parametrize("limit,workers", [(16, 0), (20, 2), (64, 2)])
def test_the_open_shard_cap_follows_a_small_ulimit(many_shards, limit, workers):
    """Under ``ulimit -n 16`` or 20 the old floor of 16 shards (plus what Python and the workers' pipes
    hold) ran out of descriptors: ``sample '?' ... [Errno 24]``."""
    result = read_under_limit(many_shards, limit=limit, workers=workers, on_error="raise")
    assert result["error"] is None
    assert every_key_once(result)
    assert result["cap"] == limit // 4


@pytest.mark.slow
@pytest.mark.parametrize("via", ["loader", "energon"])
def test_a_cap_set_above_the_limit_neither_substitutes_nor_fails(many_shards, via):
    """DATAREEL_MAX_OPEN_SHARDS above what ``ulimit -n`` allows: an open that finds no descriptor closes the
    process's shards and tries again, so the pass reads every sample once (it used to substitute each
    sample whose shard could not be opened: 74 duplicates in 104 samples)."""
    result = read_under_limit(
        many_shards,
        limit=20,
        via=via,
        on_error="substitute",
        handler=True,
        env={"DATAREEL_MAX_OPEN_SHARDS": "1000"},
    )
    assert result["error"] is None and result["handler_calls"] == []
    assert every_key_once(result)


@pytest.mark.slow
@pytest.mark.parametrize("via", ["loader", "energon"])
def test_no_free_descriptor_stops_the_run_naming_the_shard_the_cap_the_limit_and_the_fix(many_shards, via):
    result = read_under_limit(many_shards, limit=64, via=via, on_error="substitute", handler=True, fill=True)
    error = result["error"]
    assert error is not None and error["type"] == "StorageError" and error["datareel"]
    message = error["message"]
    assert str(many_shards) in message and ".tar" in message  # the shard
    assert "Errno 24" in message and "64" in message and "ulimit -n" in message  # the limit
    assert f"keeps up to {result['cap']} shards open" in message  # the cap
    assert "num_workers" in message and "DATAREEL_MAX_OPEN_SHARDS" in message  # the fixes
    assert "sample '?'" not in message
    assert result["keys"] == [] and result["handler_calls"] == []  # nothing substituted, the handler not told


# -- the classification, and its family in one process ---------------------------------------------


def _caused(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.ENFILE, "Too many open files in system"),
        OSError(errno.EIO, "Input/output error"),
        OSError(errno.ENOSPC, "No space left on device"),
        PermissionError(errno.EACCES, "Permission denied"),
        FileNotFoundError(errno.ENOENT, "No such file or directory"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        TimeoutError("timed out"),
        URLError("no route to host"),
        StorageError("s3://b/k: reading it failed after 6 tries"),
        DatasetChangedError("shard x.tar no longer matches its index"),
        _caused(DatasetError("shard x.tar: cannot read"), OSError(errno.EIO, "Input/output error")),
        _caused(ValueError("tokenizer failed"), _caused(RuntimeError("wrapped"), OSError(errno.EMFILE, "x"))),
    ],
    ids=lambda e: f"{type(e).__name__}({getattr(e, 'errno', None)})",
)
def test_failures_of_the_environment_are_not_sample_failures(exc):
    assert not sample_failure(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("cannot tokenize"),
        KeyError("txt"),
        OSError("image file is truncated"),  # PIL's, and decoders' own: no errno
        _caused(DatasetError("part 'jpg' cannot be decoded"), OSError("cannot identify image file")),
        DatasetError("shard x.tar: no valid tar header at byte 0"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_failures_of_the_sample_are_sample_failures(exc):
    assert sample_failure(exc)


class Failing:
    """40 records; record 7 fails to read with ``exc`` (a source that hits its environment)."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 7:
            raise self.exc
        return {"__key__": f"r{i:02d}", "id": i}


class FailsOn:
    """encode_sample raises ``exc`` on record ``id`` (an encoder that hits its environment)."""

    def __init__(self, exc: BaseException, id: int = 7):
        self.exc, self.id = exc, id

    def encode_sample(self, sample):
        if sample["id"] == self.id:
            raise self.exc
        return {"id": sample["id"]}


ENVIRONMENT = [
    OSError(errno.EMFILE, "Too many open files"),
    OSError(errno.EIO, "Input/output error"),
    OSError(errno.ENOSPC, "No space left on device"),
    PermissionError(errno.EACCES, "Permission denied"),
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    TimeoutError("timed out"),
]


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


def _loader(data, handled: list, **kw):
    kw.setdefault("task_encoder", Keys())
    return datareel.Loader(
        data,
        global_batch_size=8,
        micro_batch_size=8,
        shuffle=False,
        repeat=False,
        on_error="substitute",
        error_handler=lambda exc, key: handled.append(key),
        **kw,
    )


@pytest.mark.parametrize("exc", ENVIRONMENT, ids=lambda e: f"{type(e).__name__}({getattr(e, 'errno', None)})")
@pytest.mark.parametrize("where", ["read", "encode_sample"])
def test_an_environment_failure_stops_the_run_and_is_never_substituted(exc, where):
    handled: list = []
    if where == "read":
        loader = _loader(datareel.from_sequence(Failing(exc), name="env"), handled)
    else:
        data = datareel.from_sequence([{"id": i} for i in range(40)], name="env")
        loader = _loader(data, handled, task_encoder=FailsOn(exc))
    with pytest.raises(StorageError, match=r"sample index 7 of source 'env' at reel position 7 failed") as info:
        list(loader)
    assert type(exc).__name__ in str(info.value) and "not of the sample" in str(info.value)
    assert handled == []  # the handler is told of sample failures only
    assert loader.cursor == 0  # the micro-batch was not handed out, nor counted: iter(loader) makes it again


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.workers)])
def test_an_environment_failure_met_by_a_substitute_candidate_stops_the_run_too(workers):
    """Sample 3 is bad (substituted); every other read then fails for want of descriptors: no candidate
    may be taken from a failing environment, so the run stops instead of substituting around it."""

    class Source:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 3:
                raise ValueError("bad record")
            if i > 3:
                raise OSError(errno.EMFILE, "Too many open files")
            return {"__key__": str(i), "id": i}

    handled: list = []
    loader = datareel.Loader(
        datareel.from_sequence(Source(), name="s"),
        global_batch_size=4,
        micro_batch_size=4,
        shuffle=False,
        repeat=False,
        on_error="substitute",
        num_workers=workers,
        error_handler=lambda exc, key: handled.append(key),
    )
    with pytest.raises(StorageError, match=r"Too many open files"):
        list(loader)
    assert len(handled) == (1 if workers == 0 else 0)  # told of the bad record only (a worker's calls stay there)


@pytest.mark.workers
def test_sample_failures_are_still_substituted_and_handed_to_the_handler(tmp_path):
    """A part that does not decode, an encoder's ValueError, a decoder's errno-less OSError: substituted."""
    write_shard(tmp_path / "a.tar", [(f"k{i:02d}", {"json": b'{"i": %d}' % i}) for i in range(10)])
    write_shard(tmp_path / "b.tar", [("k10", {"json": b"{not json"})] + [(f"k{i}", {"json": b"{}"}) for i in (11, 12)])
    prepare_webdataset(tmp_path, progress=False)

    class Encoder:
        def encode_sample(self, sample):
            if sample["__key__"] == "k03":
                raise ValueError("cannot tokenize")
            if sample["__key__"] == "k05":
                raise OSError("image file is truncated")
            return {"key": sample["__key__"]}

    handled: list = []
    loader = datareel.Loader(
        datareel.open_dataset(tmp_path),
        global_batch_size=13,
        micro_batch_size=13,
        shuffle=False,
        repeat=False,
        on_error="substitute",
        error_handler=lambda exc, key: handled.append(key),
        task_encoder=Encoder(),
    )
    keys = [k for batch in loader for k in batch["key"]]
    assert len(keys) == 13 and not {"k03", "k05", "k10"} & set(keys)
    assert sorted(handled) == ["k03", "k05", "k10"]


@pytest.mark.workers
def test_an_environment_failure_in_the_windowed_stage_is_not_left_out():
    """A generator encoder plans its outputs per window: a failing environment must not plan a sample away."""

    class Yielding:
        def encode_sample(self, sample):
            yield {"id": sample["id"]}

    handled: list = []
    loader = _loader(
        datareel.from_sequence(Failing(OSError(errno.EIO, "Input/output error")), name="env"),
        handled,
        task_encoder=Yielding(),
    )
    with pytest.raises(StorageError, match=r"planning window 0: .*sample index 7 of source 'env'.*Input/output"):
        list(loader)
    assert handled == []


# -- shards that vanish or shrink after prepare -------------------------------------------------------


@pytest.fixture
def prepared(tmp_path):
    root = tmp_path / "ds"
    build_shards(root)  # 4 shards: 4, 7, 1 and 5 samples
    prepare_webdataset(root, progress=False)
    return root


@pytest.mark.parametrize("via", ["loader", "energon"])
def test_a_shard_deleted_after_prepare_stops_the_run_instead_of_being_substituted(prepared, via):
    """A file the index lists is gone: the environment (an unmounted file system, a deleted file), not a
    sample; substituting its samples would repeat others silently."""
    (prepared / "parts" / "data-1.tar").unlink()
    handled: list = []
    if via == "loader":
        loader = _loader(datareel.open_dataset(prepared), handled)
        run = lambda: list(loader)  # noqa: E731
    else:
        config = den.WorkerConfig(rank=0, world_size=1, num_workers=0)
        dataset = den.get_train_dataset(
            str(prepared),
            worker_config=config,
            batch_size=4,
            shuffle_buffer_size=100,
            max_samples_per_sequence=100,
            repeat=False,
            handler=lambda exc, sample, sources=None: handled.append(sample),
        )
        run = lambda: list(den.get_savable_loader(dataset))  # noqa: E731
    with pytest.raises(StorageError, match=r"shard .*data-1\.tar is missing \(listed in .nv-meta/.info.json\)"):
        run()
    assert handled == []


def test_a_shard_truncated_after_it_was_opened_stops_the_run_as_a_changed_dataset(prepared):
    """Truncated: the shard no longer matches what prepare recorded, as when found truncated on opening
    (DatasetChangedError: never substituted). Bytes damaged in place stay a sample's failure."""
    dataset = datareel.open_dataset(prepared)
    first = int(dataset.starts[3])
    dataset.read(first)  # shard 3 is open in this process now, and checked
    shard = prepared / "parts" / "data-3.tar"
    os.truncate(shard, shard.stat().st_size // 2)
    handled: list = []
    loader = _loader(dataset, handled)
    with pytest.raises(BatchError, match=r"data-3\.tar.*truncated after it was opened") as info:
        list(loader)
    assert isinstance(info.value.__cause__, DatasetChangedError) and handled == []


def test_a_jsonl_file_truncated_after_it_was_opened_stops_the_run(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(f'{{"i": {i}, "pad": "{"x" * 40}"}}\n' for i in range(16)))
    prepare_jsonl(path)
    dataset = datareel.open_dataset(path)
    dataset.read(0)
    os.truncate(path, path.stat().st_size // 2)
    handled: list = []
    with pytest.raises(BatchError, match=r"t\.jsonl sample \d+ .*truncated after it was indexed"):
        list(_loader(dataset, handled))
    assert handled == []


# -- a bucket whose retries run out ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bucket_server():
    from s3_server import s3_server

    with s3_server() as endpoint:
        yield endpoint


def test_retries_running_out_on_a_bucket_stop_the_run_instead_of_substituting(
    bucket_server, prepared, monkeypatch, tmp_path
):
    """Every ranged GET of one shard answers 500: its samples' reads end after the configured tries
    (each one HTTP request), and the loader stops naming the URL; it used to substitute them."""
    import boto3

    from datareel.storage import remote
    from s3_server import FaultyProxy, make_bucket

    bucket = f"failing-{uuid.uuid4().hex[:8]}"
    make_bucket(bucket)
    client = boto3.client("s3")
    for path in sorted(p for p in prepared.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"ds/{path.relative_to(prepared).as_posix()}")
    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"], fail_first=10**6, status=500, fail_only="data-2.tar")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("DATAREEL_REMOTE_ATTEMPTS", "2")
    monkeypatch.setattr(remote, "_PER_PROCESS", {})  # a fresh backend reads the settings
    try:
        url = f"s3://{bucket}/ds"
        dataset = datareel.open_dataset(url)
        before = proxy.failed
        with pytest.raises(StorageError, match=rf"{url}/parts/data-2\.tar: .*failed after 2 tries in"):
            dataset.read(int(dataset.starts[2]))
        assert proxy.failed - before == 2  # the documented count: 2 tries, each one HTTP request
        handled: list = []
        with pytest.raises(StorageError, match=rf"{url}/parts/data-2\.tar: .*after 2 tries.*DATAREEL_REMOTE_ATTEMPTS"):
            list(_loader(datareel.open_dataset(url), handled))
        assert handled == []
    finally:
        proxy.close()


class _HandlerStop(Exception):
    """The type a user's error handler raises to stop the loader (as Energon's tests do)."""


def _stop(exc, key):
    raise _HandlerStop(f"stop at {key}") from exc


@pytest.mark.workers
@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_handler_that_raises_stops_the_loader_with_its_own_exception(workers):
    """Energon's contract: the handler's exception is what the training loop sees (not a wrapper of ours), in the
    training process and from a worker; the batches before it were handed out."""

    class Source:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                raise ValueError("bad record")
            return {"__key__": str(i), "id": i}

    loader = datareel.Loader(
        datareel.from_sequence(Source(), name="s"),
        global_batch_size=2,
        micro_batch_size=2,
        shuffle=False,
        repeat=False,
        num_workers=workers,
        error_handler=_stop,
    )
    seen = []
    with pytest.raises(_HandlerStop, match="stop at"):
        for batch in loader:
            seen.extend(int(i) for i in batch["id"])
    assert seen == [0, 1, 2, 3]
