"""The demo's verdict: the table of phases (each resumed run's global batches against the uninterrupted
reference's) and whether every sample appeared exactly once per epoch (:func:`report`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
