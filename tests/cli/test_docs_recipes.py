"""The recipes of docs/datasets.md, run as written: the code blocks of a section, Python executed and each
``datareel`` line of a bash block run through the command's ``main`` (comments dropped)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import datareel
from datareel.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """The fenced blocks ``(language, text)`` of the section under ``heading``, up to the next heading."""
    text = DOC.read_text()
    start = text.index(f"\n{heading}\n")
    end = re.compile(r"\n#{1,3} ").search(text, start + len(heading) + 2)
    body = text[start : end.start() if end else len(text)]
    return re.findall(r"```(\w+)\n(.*?)```", body, flags=re.S)


@pytest.mark.workers  # prepare indexes the two shards in a process pool
def test_the_tiny_dataset_recipe_writes_shards_that_prepare_indexes(tmp_path, monkeypatch, capsys):
    blocks = section_blocks("### A tiny dataset to try")
    assert [lang for lang, _ in blocks] == ["python", "bash"]
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0][1], str(DOC), "exec"), {})
    commands = [shlex.split(line, comments=True) for line in blocks[1][1].splitlines() if line.strip()]
    assert [argv[:2] for argv in commands] == [["datareel", "prepare"], ["datareel", "info"], ["datareel", "preview"]]
    for argv in commands:
        assert main(argv[1:]) == 0, argv
    out = capsys.readouterr().out
    # the comment on the prepare line is what prepare answers
    answer = blocks[1][1].splitlines()[0].split("# ", 1)[1]
    assert answer in out, out
    ds = datareel.open_dataset("tiny")
    assert len(ds) == 10
    first = ds.read(0)
    assert {k: first[k] for k in ("__key__", "txt", "json")} == {
        "__key__": "sample0000",
        "txt": "caption 0",
        "json": {"id": 0},
    }
