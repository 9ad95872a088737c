"""Test configuration: hypothesis profiles, the cost markers, shared fixtures.

Profiles (``tests/profiles.py``): locally, hypothesis explores new random examples on every run
(``explore``).  Under CI (``CI`` set, as ``.ci/run`` runs) the ``ci`` profile derandomizes them:
the same examples every run, so a landing is judged on reproducible evidence; run the suite
locally (or with ``HYPOTHESIS_PROFILE=explore``) to keep searching.  ``HYPOTHESIS_PROFILE=fast``
runs a few examples of each.

Temporary files: the session points ``tempfile`` (and ``TMPDIR``, which the processes tests start inherit)
at one directory under pytest's own temp dir, so nothing lands in the system's; whatever is left there when
the session ends (a test or the library that did not remove its temporary directory) fails the session,
naming it (:func:`_session_temp_dir`).

Markers (docs/testing.md): ``slow`` starts real processes (torch.distributed, torchrun, subprocess
CLIs); ``workers`` starts worker processes (DataLoader workers, the planning process, the process
pool of ``prepare``).  A test that starts a process from Python's ``multiprocessing`` without
either marker fails here, naming the marker to add, so the fast tier ``-m "not slow and not
workers"`` stays in one process.
"""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing.process
import os
import sys
import tempfile
from pathlib import Path

import pytest

import profiles
from datareel.cli.prepare import prepare_webdataset
from rank_launcher import RankServer
from wds_helpers import write_shard

profiles.load()

_started: list[str] = []  # processes started by the running test's call phase
_start = multiprocessing.process.BaseProcess.start


def _recording_start(self: multiprocessing.process.BaseProcess) -> None:
    _started.append(self.name)
    _start(self)


multiprocessing.process.BaseProcess.start = _recording_start  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each test, what earlier tests left is collected and the rest (modules imported so far, torch,
    megatron.energon, session fixtures) is moved out of the collector's reach with :func:`gc.freeze`: each
    ``gc.collect()`` inside a test (Energon's loaders, and the facade's like them, run one every 10 batches by
    default) then walks only what that test made, not the session's few hundred thousand objects (0.12 s a
    collection before, 2 s of a 2-s test).  Cyclic garbage of a test is collected before the next one starts."""
    gc.collect()
    gc.freeze()


HUNG_TEST_SECONDS = 300
"""A test (setup and teardown included) still running after this long has hung where no guard reaches (a
finalizer in a garbage collection, say): every thread's stack goes to stderr and the session ends with exit
code 1, in minutes rather than at CI's 90-minute limit.  No test takes 30 s."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    faulthandler.dump_traceback_later(HUNG_TEST_SECONDS, exit=True, file=sys.__stderr__)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _started.clear()
    result = yield
    if _started and not (item.get_closest_marker("workers") or item.get_closest_marker("slow")):
        names = sorted(set(_started))
        record = os.environ.get("DATAREEL_RECORD_PROCESSES")  # survey mode: list the tests instead of failing
        if record:
            with open(record, "a") as out:
                out.write(f"{item.nodeid}\t{len(_started)}\t{','.join(names)}\n")
        else:
            pytest.fail(
                f"this test started {len(_started)} process(es) ({', '.join(names[:3])}) but is marked neither "
                "`workers` nor `slow`: mark it @pytest.mark.workers (DataLoader workers, the planning process) "
                "so that the fast tier (-m 'not slow and not workers') stays in one process (docs/testing.md)",
                pytrace=False,
            )
    return result


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """A prepared Energon dataset of 3 shards × 30 TextSamples (keys ``t{shard}-{i:03d}``)."""
    root = tmp_path_factory.mktemp("texts")
    for s in range(3):
        write_shard(root / f"part-{s}.tar", [(f"t{s}-{i:03d}", {"txt": f"text {s} {i}".encode()}) for i in range(30)])
    prepare_webdataset(root, sample_type="TextSample", field_map={"text": "txt"}, progress=False)
    return root


KEPT = ("pymp-", "torchelastic_", "torchinductor_")
"""What may stay in the session's temp dir (pytest removes it with the session's directory): what others make
in the processes tests start and do not remove: Python's multiprocessing directory of a process that ended by
``os._exit`` or a signal, torchrun's log directory when it is given no ``--log-dir``; torch's compile cache
(``torchinductor_<user>``), which torch keeps across processes by design.  The node's block cache
(:mod:`datareel.storage.node_cache`, meant to outlive every process) is not among them: the session points
``DATAREEL_NODE_CACHE`` at a directory of its own, so a default cache directory in the temp dir is a test or a
code path that does not read the variable."""


@pytest.fixture(scope="session", autouse=True)
def _session_temp_dir(tmp_path_factory):
    """Every temporary file of the session goes into ``<pytest basetemp>/system-tmp``, not the system temp dir;
    at the end, what is left there (but :data:`KEPT`) fails the session: a test writes under its ``tmp_path``,
    library code removes its temporary directories. Only this session writes there: no false alarm from
    other processes on the machine."""
    ours = tmp_path_factory.mktemp("system-tmp", numbered=False)
    node = tmp_path_factory.mktemp("node-cache", numbered=False)
    saved = os.environ.get("TMPDIR"), tempfile.tempdir, os.environ.get("DATAREEL_NODE_CACHE")
    os.environ["TMPDIR"] = tempfile.tempdir = str(ours)
    os.environ.setdefault("DATAREEL_NODE_CACHE", str(node))  # a test of the default sets tempfile.tempdir itself
    try:
        yield ours
    finally:
        for name, value in (("TMPDIR", saved[0]), ("DATAREEL_NODE_CACHE", saved[2])):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = saved[1]
    left = leftovers(ours)
    if left:
        pytest.fail(
            f"the test session left {len(left)} entries in its temporary directory {ours} (the system temp dir, "
            f"had it not been redirected): {', '.join(left[:10])}; a test writes under its tmp_path, and library "
            "code removes the temporary directories it makes (or says in its docstring why one outlives the "
            "process, and is listed in tests/conftest.py KEPT)",
            pytrace=False,
        )


def leftovers(folder: Path) -> list[str]:
    """The entries of ``folder`` nobody should have left there (all but :data:`KEPT`), sorted."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(KEPT))


@pytest.fixture(scope="session", autouse=True)
def _energon_workers_stopped_at_once():
    """megatron.energon's savable loader (the reference many tests run beside ours) keeps a non-daemon command
    thread in each worker that ends only on its own ``(None,)`` command, which torch's worker shutdown does not
    send: each worker outlives torch's 5-s join and torch then terminates it (10 s per loader with 2 workers, most
    of the time of the tests that run it).  For Energon's savable loaders only, this kills the workers at
    the start of torch's shutdown instead of after its timeout, the outcome torch reaches anyway, through
    datareel's :func:`~datareel.execute.lost.stop_iterator` (their pids leave torch's SIGCHLD watch first, and
    the stop event is not set: terminating them and then letting torch set it hung the session once, a worker
    killed while it held the event's lock).  Loaders of datareel are not
    touched: a slow shutdown of ours still shows.  Only the process that started the workers acts: a worker of
    another loader, forked while this iterator lived, may collect its copy of it."""
    try:
        from megatron.energon.savable_loader import SavableDatasetWrapper
    except ImportError:
        yield
        return
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    from datareel.execute.lost import stop_iterator

    original = _MultiProcessingDataLoaderIter._shutdown_workers

    def shutdown_workers(self):
        energons = isinstance(getattr(self, "_dataset", None), SavableDatasetWrapper)
        # only in the process that started the workers: a process forked from it (a worker of another loader)
        # that collects its copy of this iterator must not signal them
        if energons and not self._shutdown and all(w._parent_pid == os.getpid() for w in self._workers):
            # killed without touching what they share: torch's shutdown after terminating them set the stop
            # event, whose lock a worker killed at the wrong instruction holds for ever (a hung session)
            stop_iterator(self, broken=True)
            return
        original(self)

    _MultiProcessingDataLoaderIter._shutdown_workers = shutdown_workers
    try:
        yield
    finally:
        _MultiProcessingDataLoaderIter._shutdown_workers = original


@pytest.fixture(scope="session")
def ranks():
    """Ranks of a script forked from one server that imported torch and both Energons once, as torchrun would
    start them (tests/rank_launcher.py); started by the first test that asks, ended with the session."""
    server = RankServer()
    yield server
    server.close()
