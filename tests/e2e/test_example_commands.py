"""The commands in examples/energon_vlm_client.py's docstring, run as written (parsed from the docstring): they
make and prepare the captioning dataset with its val split, and the datareel run that saves on 2 ranks and the
one that resumes on 4 compose: the resumed global batches are the saving run's next ones."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from datareel.testing.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "energon_vlm_client.py"
pytestmark = pytest.mark.slow


def docstring_commands() -> list[list[str]]:
    """Each indented command of the docstring (continuation lines joined), optional ``[...]`` flags left out."""
    doc = ast.get_docstring(ast.parse(SCRIPT.read_text()))
    assert doc is not None
    commands, current = [], ""
    for line in doc.splitlines():
        if not line.startswith("    ") or not line.strip():
            continue
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(shlex.split(" ".join(w for w in current.split(" ") if not w.startswith("[") and
                                             not w.endswith("]"))))  # fmt: skip
        current = ""
    return commands


def resolve(argv: list[str], script: Path, dataset: Path, out: Path) -> list[str]:
    """The README's ``.venv/bin/`` tools as this interpreter runs them; the placeholders filled in."""
    tool, *rest = argv
    fill = {"DATASET": str(dataset), "OUT": str(out), "examples/energon_vlm_client.py": str(script)}
    rest = [fill.get(word, word) for word in rest]
    if tool == ".venv/bin/python":
        return [sys.executable, *rest]
    if tool == ".venv/bin/datareel":
        return [sys.executable, "-m", "datareel", *rest]
    if tool == ".venv/bin/torchrun":
        local = ["--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={free_port()}"]
        return [sys.executable, "-m", "torch.distributed.run", *local, *rest]
    raise AssertionError(f"the docstring runs {tool!r}: not a tool of the README's virtual environment")


def run(cmd: list[str], timeout: float = 300) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"{shlex.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def nproc(argv: list[str]) -> int:
    (flag,) = [w for w in argv if w.startswith("--nproc-per-node=")]
    return int(flag.split("=")[1])


def global_batches(out: Path, world: int) -> list[list]:
    ranks = [json.loads((out / f"train-{r}.json").read_text()) for r in range(world)]
    return [[ranks[r][step][a] for a in range(len(ranks[0][step])) for r in range(world)]
            for step in range(len(ranks[0]))]  # fmt: skip


def test_the_docstring_commands_make_the_dataset_and_compose(tmp_path):
    make, prepare, on_energon, save, resume = docstring_commands()
    assert make[1:] == ["examples/energon_vlm_client.py", "--make-dataset", "DATASET"]
    assert prepare[:3] == [".venv/bin/datareel", "prepare", "DATASET"] and "--split-ratio" in prepare
    assert "--global-batch-size" not in on_energon  # not Energon's argument
    size = save[save.index("--global-batch-size") + 1]
    assert size == resume[resume.index("--global-batch-size") + 1]  # the resume must name the saved size
    dataset, out = tmp_path / "captions", tmp_path / "out"
    switched = tmp_path / "client.py"  # the two megatron.energon imports switched to datareel.energon
    switched.write_text(SCRIPT.read_text().replace("megatron.energon", "datareel.energon"))
    run(resolve(make, SCRIPT, dataset, out))
    run(resolve(prepare, SCRIPT, dataset, out))
    import datareel

    assert len(datareel.open_dataset(dataset, split="val")) > 0  # the split the client's validation reads
    run(resolve(save, switched, dataset, out))
    saving = nproc(save)
    first = global_batches(out, saving)
    steps, saved_at = int(save[save.index("--steps") + 1]), int(save[save.index("--save-at") + 1])
    assert len(first) == steps and sorted(p.name for p in (out / "state").iterdir()) == [
        f"dataloader-{r}.pt" for r in range(saving)
    ]
    run(resolve(resume, switched, dataset, out))
    resuming = nproc(resume)
    assert resuming != saving
    resumed = global_batches(out, resuming)
    assert len(resumed) == int(resume[resume.index("--steps") + 1]) == steps - saved_at
    assert [[r["keys"] for r in b] for b in resumed] == [[r["keys"] for r in b] for b in first[saved_at:]]
    assert resumed == first[saved_at:]  # the augmentation (token and image sums) too
    assert json.loads((out / "val-0.json").read_text())  # validation ran on the val split
