"""The Run/Loader split: a run is a frozen value the loader replaces, its answers are the loader's, restoring
returns a new run, the sampler reaches no loader, and the Loader stays a thin face (<= 150 lines)."""

from __future__ import annotations

import dataclasses
import gc
import types
import weakref
from pathlib import Path

import pytest

import datareel
from datareel import loader as loader_module
from datareel.run import Recipe, Run


def make(**kwargs):
    options = dict(global_batch_size=8, micro_batch_size=2, seed=3, world_size=2, rank=0, repeat=False)
    return datareel.Loader(list(range(40)), **{**options, **kwargs})


def test_a_run_is_a_frozen_value_without_mutable_containers():
    loader = make()
    run = loader.run
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.cursor = run.cursor  # type: ignore[misc]
    for value in (run, run.recipe):
        assert dataclasses.is_dataclass(value) and type(value).__dataclass_params__.frozen
        for field in dataclasses.fields(value):
            assert not isinstance(getattr(value, field.name), (dict, list, set)), field.name
    assert isinstance(run.recipe, Recipe) and run.recipe.seed == 3
    loader.close()


def test_handing_a_batch_out_replaces_the_run_and_leaves_the_old_one_as_it_was():
    loader = make()
    before = loader.run
    batches = iter(loader)
    next(batches)
    assert loader.run is not before and before.position == 0 and loader.run.position == 4
    assert before.global_batch == 0 and not before.at_end
    loader.close()


def test_the_loader_answers_what_its_run_answers_at_every_step():
    loader = make()
    batches = iter(loader)
    for _ in range(len(loader)):
        run = loader.run
        assert (loader.cursor, loader.reel_cursor, loader.layout, loader.reel) == (
            run.position,
            run.cursor,
            run.layout,
            run.reel,
        )
        assert loader.global_batch == run.global_batch and loader.at_global_batch_boundary == run.at_boundary
        assert loader.accumulation_steps == run.accumulation_steps == loader.accumulation_steps_at(run.global_batch)
        assert loader.global_batch_size == run.global_batch_size == loader.global_batch_size_at(0) == 8
        assert loader.state_dict() == run.state_dict() and len(loader) == run.rank_steps(0)
        next(batches)
    assert loader.run.at_end and loader.at_global_batch_boundary
    loader.close()


def test_restore_returns_another_run_and_changes_neither_the_run_nor_the_loader():
    saved = make()
    batches = iter(saved)
    for _ in range(3):
        next(batches)
    state = saved.state_dict()
    fresh = make(micro_batch_size=1, world_size=4, rank=2)
    start = fresh.run
    restored = start.restore(state)
    assert isinstance(restored, Run) and restored is not start
    assert start.position == 0 and fresh.cursor == 0  # nothing changed until the loader takes the run
    assert restored.position == saved.cursor and restored.state_dict() == state
    assert restored.layout.world_size == 4  # restored onto this run's topology
    fresh.load_state_dict(state)
    assert fresh.run == restored and fresh.state_dict() == state
    saved.close()
    fresh.close()


def _reachable(start, limit=20000):
    """Objects reachable from ``start`` (following weak references too), without modules, classes and
    functions (whose globals reach everything)."""
    seen, todo = {}, [start]
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType)):
            continue
        seen[id(obj)] = obj
        if isinstance(obj, weakref.ref):
            target = obj()
            if target is not None:
                todo.append(target)
        todo.extend(gc.get_referents(obj))
    return seen.values()


def test_the_sampler_reaches_the_run_but_not_the_loader():
    loader = make()
    iter(loader)
    sampler = loader._driver.dataloader.sampler
    reached = list(_reachable(sampler))
    assert any(obj is loader.run for obj in reached)
    assert not any(isinstance(obj, datareel.Loader) for obj in reached)
    loader.close()


def test_the_loader_is_a_thin_face():
    lines = Path(loader_module.__file__).read_text().splitlines()
    assert len(lines) <= 150, f"src/datareel/loader.py has {len(lines)} lines; the Loader is a thin face over the Run"


def test_the_loaders_delegated_methods_take_keywords_as_before():
    loader = make()
    assert loader.accumulation_steps_at(b=0) == loader.accumulation_steps_at(0) == 2
    assert loader.global_batch_size_at(b=1) == 8
    loader.close()


def test_a_stage_spec_that_would_overwrite_a_loader_field_is_refused():
    loader = make()
    reel = loader.run.reel
    clashing = types.SimpleNamespace(spec=lambda: {"seed": 0, "stage": {"window": 4}})
    with pytest.raises(datareel.OptionError, match=r"\['seed'\].*under 'stage'"):
        dataclasses.replace(loader.run, reel=clashing).spec()
    assert loader.run.reel is reel and loader.state_dict()["spec"]["seed"] == 3
    loader.close()
