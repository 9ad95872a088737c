"""The README's Use example: its Loader call names only the Loader's arguments (``rank=`` and ``world_size=``
among them), and the example runs (two global batches instead of a hundred, on a list of 200 dicts)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import datareel

README = Path(__file__).resolve().parents[2] / "README.md"


def use_example() -> str:
    text = README.read_text()
    section = text[text.index("\n## Use\n") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_use_example_passes_rank_and_world_size_by_the_loaders_names():
    calls = [
        node
        for node in ast.walk(ast.parse(use_example()))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "datareel.Loader"
    ]
    assert len(calls) == 1
    given = {k.arg for k in calls[0].keywords}
    assert {"rank", "world_size"} <= given
    assert given <= set(inspect.signature(datareel.Loader).parameters)


@pytest.mark.workers  # the example's num_workers=4
def test_the_use_example_runs(tmp_path, monkeypatch):
    code = use_example()
    assert "range(loader.accumulation_steps * 100)" in code
    code = code.replace("range(loader.accumulation_steps * 100)", "range(loader.accumulation_steps * 2)")
    monkeypatch.chdir(tmp_path)
    scope = {"my_list_of_dicts": [{"id": i} for i in range(200)]}
    exec(compile(code, str(README), "exec"), scope)
    loader = scope["loader"]
    assert (loader.rank, loader.world_size) == (0, 1)
    assert loader.cursor == 2 * 64 and (tmp_path / "ckpt.pt").is_file()
