"""Under the ``spawn`` and ``forkserver`` start methods everything the worker (or planning) processes run is
pickled, classes and functions by reference: what cannot be (a class or function defined inside a
function, a lambda, a lock) is refused when the Loader is built, before any process starts, with an
:class:`~datareel.OptionError` naming the object, the rule and the fix (it was a bare pickling
``AttributeError`` from inside torch when the workers started)."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch.utils.data

import datareel

OPTIONS = dict(global_batch_size=4, micro_batch_size=4, world_size=1, rank=0, seed=3)


class Plain:
    """A module-level encoder: picklable by reference."""

    def encode_sample(self, sample):
        return sample * 10


class HoldsALambda(Plain):
    def __init__(self):
        self.scale = lambda x: x * 10


class HoldsALock(Plain):
    def __init__(self):
        self.lock = threading.Lock()


def log_errors(exc, key):
    """A module-level error handler."""


def numbers():
    return datareel.from_sequence(list(range(40)), name="numbers")


def local_encoder():
    class Encoder:
        def encode_sample(self, sample):
            return sample

    return Encoder()


def local_handler():
    def handler(exc, key):
        pass

    return handler


def local_generator_encoder():
    class Expands:
        def encode_sample(self, sample):
            yield sample

    return Expands()


def local_dataset():
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            return i * i

    return datareel.from_sequence(Squares(), name="squares")


CASES = {
    "local encoder class": (
        lambda: dict(task_encoder=local_encoder()),
        r"task_encoder \(.*local_encoder\.<locals>\.Encoder\) .*a class or function defined inside a function "
        r"\('local_encoder\.<locals>\.Encoder'\)",
    ),
    "local error_handler": (
        lambda: dict(error_handler=local_handler(), on_error="substitute"),
        r"error_handler \(.*local_handler\.<locals>\.handler\)",
    ),
    "encoder holding a lambda": (
        lambda: dict(task_encoder=HoldsALambda()),
        r"task_encoder\.scale \(.*<lambda>\) .*a lambda",
    ),
    "encoder holding a lock": (
        lambda: dict(task_encoder=HoldsALock()),
        r"task_encoder\.lock \(.*lock\) .*does not pickle .*make it picklable",
    ),
    "dataset of a local class": (
        lambda: dict(dataset=local_dataset()),
        r"dataset source 'squares'.* \(.*local_dataset\.<locals>\.Squares\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", ["spawn", "forkserver", "spawn context"])
def test_what_spawned_workers_cannot_receive_is_refused_when_the_loader_is_built(case, method):
    make, named = CASES[case]
    kwargs = make()
    dataset = kwargs.pop("dataset", None) or numbers()
    context = multiprocessing.get_context("spawn") if method == "spawn context" else method
    before = multiprocessing.active_children()
    with pytest.raises(datareel.OptionError) as info:
        datareel.Loader(dataset, num_workers=2, multiprocessing_context=context, **OPTIONS, **kwargs)
    message = str(info.value)
    assert info.match(named), message
    assert f"multiprocessing_context='{method.split()[0]}'" in message
    assert "pickles what it runs, classes and functions by reference" in message  # the rule
    assert "or use multiprocessing_context='fork'" in message  # the fix
    if "local" in case:
        assert "define it at module level" in message
    assert multiprocessing.active_children() == before  # refused before any process started


def test_the_planning_process_is_checked_too_without_workers():
    """The windowed stage's planning process gets the encoder as workers do (num_workers=0)."""
    with pytest.raises(datareel.OptionError, match=r"task_encoder \(.*Expands\).*define it at module level"):
        datareel.Loader(numbers(), task_encoder=local_generator_encoder(), multiprocessing_context="spawn", **OPTIONS)
    inline = datareel.WindowedStage(background=False)  # plans in this process: nothing to send
    datareel.Loader(
        numbers(), task_encoder=local_generator_encoder(), stage=inline, multiprocessing_context="spawn", **OPTIONS
    )


@pytest.mark.workers
def test_fork_and_single_process_loaders_take_local_classes():
    for kwargs in (dict(num_workers=0, multiprocessing_context="spawn"), dict(num_workers=1)):
        loader = datareel.Loader(numbers(), task_encoder=local_encoder(), shuffle=False, **OPTIONS, **kwargs)
        assert next(iter(loader)).tolist() == [0, 1, 2, 3]
        loader.close()


@pytest.mark.workers  # a spawned worker process
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_module_level_encoder_runs_under_spawn(method):
    reference = [b.tolist() for _, b in zip(range(3), datareel.Loader(numbers(), task_encoder=Plain(), **OPTIONS))]
    loader = datareel.Loader(
        numbers(),
        task_encoder=Plain(),
        error_handler=log_errors,
        on_error="substitute",
        num_workers=1,
        multiprocessing_context=method,
        **OPTIONS,
    )
    assert [b.tolist() for _, b in zip(range(3), loader)] == reference
    loader.close()
