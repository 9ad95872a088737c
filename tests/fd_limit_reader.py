"""Read a prepared dataset under a lowered ``ulimit -n``, in a process of its own (the tests start it).

    python tests/fd_limit_reader.py '{"root": ..., "limit": 20, "on_error": "substitute", "workers": 0,
                                      "handler": true, "fill": false, "via": "loader"}'

Lowers the soft RLIMIT_NOFILE to ``limit`` after the imports, then reads one pass of the dataset's
train split (micro-batches of 8, shuffled) and prints one JSON line: the keys read (in order), the
number of error-handler calls, the open-shard cap, and the error that ended the pass (type and
message), if any.  ``fill``: before reading, take every free descriptor (``/dev/null``), so that no
shard can be opened at all.  ``via: "energon"`` reads through the Energon facade
(``get_train_dataset(handler=...)``) instead of ``datareel.Loader``.
"""

from __future__ import annotations

import json
import os
import resource
import sys

import datareel
from datareel import energon as den
from datareel.sources import handles


class Keys:
    def batch(self, samples):
        return [s["__key__"] for s in samples]


def main(args: dict) -> dict:
    calls: list[str] = []

    def handler(exc, key, *rest):
        calls.append(f"{key}: {exc}")

    if args.get("fill"):  # what the first batch imports lazily is imported now, while descriptors are free
        next(iter(make_loader(args, handler)))
        handles.handles().close_all()
    loader = make_loader(args, handler)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (args["limit"], hard))
    held = []
    if args.get("fill"):
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
    keys: list[str] = []
    error = None
    try:
        for batch in loader:
            keys += batch
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc), "datareel": isinstance(exc, datareel.DatareelError)}
    for fd in held:
        os.close(fd)
    return {"keys": keys, "handler_calls": calls, "cap": handles.handles().capacity, "error": error}


def make_loader(args: dict, handler) -> object:
    on_error, handler_given = args.get("on_error", "raise"), args.get("handler", False)
    if args.get("via") == "energon":
        config = den.WorkerConfig(rank=0, world_size=1, num_workers=args.get("workers", 0))
        return den.get_savable_loader(
            den.get_train_dataset(
                args["root"],
                worker_config=config,
                batch_size=8,
                shuffle_buffer_size=100,
                max_samples_per_sequence=100,
                task_encoder=Keys(),
                repeat=False,
                handler=handler if handler_given else None,
            )
        )
    return datareel.Loader(
        datareel.open_dataset(args["root"]),
        global_batch_size=8,
        micro_batch_size=8,
        seed=1,
        repeat=False,
        num_workers=args.get("workers", 0),
        on_error=on_error,
        error_handler=handler if handler_given else None,
        task_encoder=Keys(),
    )


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
