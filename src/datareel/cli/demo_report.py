"""The demo's verdict: the table of phases (each resumed run's global batches against the uninterrupted
reference's) and whether every sample appeared exactly once per epoch (:func:`report`); with ``--keep``, the
directory checked (:func:`keep_directory`) and what it holds, with the commands to try on it (:func:`kept`)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import OptionError


def report(
    reference: list[list[Any]],
    results: list[tuple[Any, int, list[list[Any]]]],
    state: str | None,
    *,
    samples: int,
    global_batch_size: int,
    mode: str,
    out: Callable[[str], Any],
    phases: int,
) -> bool:
    """Print the table and the verdict through ``out``; whether every resumed run matched the reference, the
    ranks saved one state, every sample appeared once per epoch and all ``phases`` ran."""
    total = len(reference)
    checkpoint_at = results[0][0].batches
    checks = [
        batches == reference[first : first + len(batches)] and len(batches) == phase.batches
        for phase, first, batches in results
    ]
    once = _exactly_once_per_epoch(reference, samples)
    out(
        f"datareel demo ({mode}): {samples} samples, global batch {global_batch_size}, {total} global "
        f"batches (= {total * global_batch_size / samples:.2f} epochs), checkpoint after global batch "
        f"{checkpoint_at - 1}\n"
    )
    out(f"{'run':<44}{'micro':>6}{'accum':>6}  {'global batches':<15}{'result'}")
    out(f"{'uninterrupted reference (1 rank)':<44}{global_batch_size:>6}{1:>6}  {'0-' + str(total - 1):<15}reference")
    for i, ((phase, first, batches), ok) in enumerate(zip(results, checks)):
        label = f"{phase.label}, then checkpoint" if i == 0 else f"resume on {phase.label}"
        accum = global_batch_size // (phase.micro_batch_size * phase.world_size)
        span = f"{first}-{first + len(batches) - 1}"
        out(f"{label:<44}{phase.micro_batch_size:>6}{accum:>6}  {span:<15}{'identical' if ok else 'DIFFERENT'}")
    first_ranks = results[0][0].world_size
    if state is None:
        out(f"\ncheckpoint: the {first_ranks} ranks saved DIFFERENT states")
    else:
        out(f"\ncheckpoint: {len(state)} bytes of JSON, identical on all {first_ranks} ranks")
    out(f"every sample exactly once per epoch in the reference: {'yes' if once else 'NO'}")
    passed = all(checks) and state is not None and once and len(results) == phases
    out(
        "\nPASS: every global batch after the restore equals the uninterrupted run's"
        if passed
        else "\nFAIL: the resumed runs differ from the uninterrupted run"
    )
    return passed


def _exactly_once_per_epoch(batches: list[list[Any]], samples: int) -> bool:
    ids = [record["id"] for batch in batches for record in batch]
    for start in range(0, len(ids), samples):
        epoch = ids[start : start + samples]
        if len(set(epoch)) != len(epoch) or (len(epoch) == samples and sorted(epoch) != list(range(samples))):
            return False
    return True


def keep_directory(path: Path) -> Path:
    """``--keep DIR``: a new or empty directory (made here), so the demo's files mix with nothing. -> ``DIR``"""
    if path.exists() and not path.is_dir():
        raise OptionError(f"--keep {path}: {path} is a file: give a new or empty directory for the demo's files")
    if path.is_dir() and any(path.iterdir()):
        held = ", ".join(sorted(p.name for p in path.iterdir())[:3])
        raise OptionError(
            f"--keep {path}: {path} is not empty (it holds {held}, ...): the demo keeps its dataset and "
            "checkpoint only in a new or empty directory; give another one, or empty this one"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def kept(
    where: Path, data: Path, state: str | None, phases: Sequence[Any], *, samples: int, global_batch_size: int
) -> str:
    """What ``--keep`` left in ``where`` and the operating commands to try on it (each line runs as written)."""
    q = shlex.quote
    first, resume = phases[0], phases[1]
    lines = [
        f"\nkept in {where} (delete it when done):",
        f"  {data}  the {samples} samples as WebDataset shards, prepared (.tar.idx, .nv-meta/)",
    ]
    commands = [f"datareel info {q(str(data))}", f"datareel preview {q(str(data))} --count 2 --decode"]
    if state is not None:
        ckpt = q(str(where / "checkpoint.json"))
        lines.append(
            f"  {where / 'checkpoint.json'}  the loader state the {first.world_size} ranks saved after global "
            f"batch {first.batches - 1}"
        )
        commands += [
            f"datareel inspect {ckpt} {q(str(data))}",
            f"datareel verify {ckpt} {q(str(data))} --world-size {resume.world_size} "
            f"--micro-batch-size {resume.micro_batch_size}",
        ]
    commands.append(
        f"datareel plot {q(str(data))} --global-batch-size {global_batch_size} --steps 20 "
        f"--out {q(str(where / 'plot.png'))}  # needs matplotlib (the [plot] extra)"
    )
    return "\n".join([*lines, "try the operating commands on them:", *(f"  {c}" for c in commands)])
