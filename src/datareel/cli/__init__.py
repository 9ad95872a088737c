"""The ``datareel`` command: demo, prepare, info, inspect, verify, preview, plot.

Building the parser imports nothing heavy (no torch): ``datareel --help``, ``datareel CMD --help`` and
argument errors answer at once; each command imports what it needs when it runs. Every command takes
``--debug`` and ``--quiet`` before or after its name. Each answer goes out in one write, newline included
(``say``), and is flushed before the command returns: a reader that closes the pipe early
(``datareel ... | head``) ends the command quietly with 141, the shell's status for a closed pipe, whenever
the closing is noticed (the last flush included), and one that read a whole answer never does.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DatareelError
from .parser import DEBUG_HELP as DEBUG_HELP
from .parser import QUIET_HELP as QUIET_HELP
from .parser import _batch_sizes as _batch_sizes
from .parser import _parser


def _dataset(parser: argparse.ArgumentParser, args: argparse.Namespace, required: bool) -> str | None:
    """The dataset given to ``inspect`` / ``verify`` as ``DATASET`` or ``--dataset DATASET`` (one of them)."""
    given, option = args.dataset, args.dataset_option
    if given is not None and option is not None and given != option:
        parser.error(f"the dataset is given twice, as {given!r} and --dataset {option!r}: give it once")
    dataset = given if given is not None else option
    if dataset is None and required:
        parser.error(f"{args.command} needs the job's dataset: datareel {args.command} STATE DATASET ...")
    if dataset is None and (args.split != "train" or args.name is not None):
        parser.error("--split and --name describe the job's dataset: give the dataset too")
    return dataset


def say(text: str) -> None:
    """A command's answer (one or more lines) on stdout, in one write: with ``PYTHONUNBUFFERED`` set, ``print``
    writes the text and its newline apart, and a reader that closes between the two turned a complete answer
    into a broken pipe."""
    data = text + "\n"
    raw = getattr(sys.stdout, "buffer", None)
    if not isinstance(raw, io.RawIOBase):  # buffered (or a stand-in): the buffer writes all of it, or raises
        sys.stdout.write(data)
        return
    # unbuffered: the text layer hands the file one write and drops what a short write leaves over (a pipe whose
    # reader closes mid-answer), so write the bytes here until all are out: the next write then raises EPIPE
    sys.stdout.flush()
    view = memoryview(data.encode(sys.stdout.encoding, sys.stdout.errors or "strict"))
    while view:
        written = raw.write(view)
        if written is None:  # a non-blocking stdout that is full
            raise BlockingIOError(errno.EAGAIN, "stdout is non-blocking and full")
        view = view[written:]


def _stdout_gone() -> int:
    """The reader of stdout went away: point stdout at /dev/null (so the interpreter's final flush does not
    complain again) and give the shell's status for a tool stopped by a closed pipe, 128 + SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def _flush_after_error() -> None:
    """Flush what the command printed before its error, quietly if the reader is gone too."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = _run(args.commands[args.command], args)  # its argument errors show the command's usage
        sys.stdout.flush()  # here, not at interpreter exit: a reader gone by then is the quiet 141 below too
        return code
    except BrokenPipeError:  # the reader went away (`datareel ... | head`): stop quietly, as Unix tools do
        return _stdout_gone()
    except (DatareelError, OSError) as exc:  # expected: bad input, a missing file; one line, no traceback
        _flush_after_error()
        if args.debug:
            raise
        print(f"datareel {args.command}: error: {_in_flags(str(exc))}", file=sys.stderr)
        if not isinstance(exc, DatareelError):
            print("(run with --debug for the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _flush_after_error()
        if args.debug:
            raise
        print(f"datareel {args.command}: interrupted; nothing half-written was kept", file=sys.stderr)
        return 130


IN_FLAGS = (
    # the library's words for a keyword argument -> the command line's flag
    (re.compile(r"pass one of them as split=$"), "pass one of them as --split"),
    (
        re.compile(r"^image_decode=(.*) \(or None to keep image bytes\)$"),
        r"--image-decode \1 (or none to keep image bytes)",
    ),
)


def _in_flags(message: str) -> str:
    """An error of the library, in the command line's words: ``--split``, not ``split=``."""
    for pattern, flags in IN_FLAGS:
        message = pattern.sub(flags, message)
    return message


def _opened(dataset: Any, state: Any) -> Any:
    """The job's dataset as the state read it: with the remainder a state saved after adopting a megatron.energon
    checkpoint records in front of it (:mod:`datareel.blend.adopted`)."""
    from ..blend.adopted import adopted_from_state

    return adopted_from_state(dataset, state) or dataset


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        from .demo import run_demo

        if args.samples < 1:
            parser.error(f"--samples={args.samples} must be at least 1")
        passed = run_demo(
            samples=args.samples,
            seed=args.seed,
            distributed=args.distributed,
            out=say,
            progress=not args.quiet,
            keep=args.keep,
        )
        return 0 if passed else 1
    if args.command == "prepare":
        from ..errors import DatasetError
        from ..formats import format_of
        from ..storage import is_remote

        kind = format_of(args.path)  # the first of datareel.formats.FORMATS that detects the path
        if is_remote(args.path) and (not kind.prepares_in_stores or args.lengths):
            parser.error("on a URL, prepare indexes WebDataset shards only (no .jsonl, no --lengths yet)")
        try:
            field_map = json.loads(args.field_map) if args.field_map else None
        except json.JSONDecodeError as exc:
            parser.error(f"--field-map {args.field_map!r} is not JSON: {exc}")
        if kind.prepare is None:
            raise DatasetError(f"{args.path} is a {kind.name}: it needs no preparing itself, its datasets do")
        answer = kind.prepare(
            args.path,
            split_ratio=args.split_ratio,
            sample_type=args.sample_type,
            field_map=field_map,
            workers=args.workers,
            overwrite=args.overwrite,
            progress=not args.quiet,
            lengths=args.lengths,
        )
        if answer is not None:  # None: already prepared, only its length index is asked for
            say(answer)
        if args.lengths:
            from .lengths import compute_length_index

            sys.path.insert(0, os.getcwd())  # `--lengths mymodule:fn` from the current directory
            target = compute_length_index(args.path, args.lengths, workers=args.workers, progress=not args.quiet)
            say(f"{args.path}: length index written to {target}")
        return 0
    if args.command == "info":
        from .info import dataset_info, format_info

        result = dataset_info(args.path)
        say(json.dumps(result, indent=2) if args.json else format_info(result))
        return 0
    if args.command == "inspect":
        from .inspect_energon import is_energon_checkpoint

        if is_energon_checkpoint(args.state):  # Megatron's per-rank files of a megatron.energon job
            from .inspect_energon import describe_energon, format_energon

            order = {
                "shuffle_buffer_size": args.shuffle_buffer_size,
                "max_samples_per_sequence": args.max_samples_per_sequence,
                "parallel_shard_iters": args.parallel_shard_iters,
            }
            found = describe_energon(args.state, _dataset(parser, args, required=False), args.split, order)
            say(json.dumps(found, indent=2) if args.json else format_energon(found))
            return 0
        from .inspect_state import describe_state, format_description, load_state_file

        state, where = load_state_file(args.state, args.key, trusted=args.trusted)
        described = {"file": str(args.state), "key": where, **describe_state(state)}
        dataset = _dataset(parser, args, required=False)
        if dataset is not None:
            from ..blend import open_dataset
            from .inspect_state import sources_at_cursor

            described["per_source"] = sources_at_cursor(
                state,
                _opened(open_dataset(dataset, split=args.split, name=args.name), state),
                shown=dataset,
                trusted=args.trusted,
                task_encoder=args.task_encoder,
            )
        say(json.dumps(described, indent=2) if args.json else format_description(described))
        return 1 if described["check"].startswith("MISMATCH") else 0  # a state that was edited or spliced
    if args.command == "verify":
        from ..blend import open_dataset
        from .inspect_state import load_state_file
        from .verify import format_verdict, verify_state

        dataset = _dataset(parser, args, required=True)
        if args.show < 1:
            parser.error(f"--show={args.show} must be at least 1")
        if args.allow_batch_size_change and args.global_batch_size is None:
            parser.error("--allow-batch-size-change needs --global-batch-size: the size (or schedule) to change to")
        state, _ = load_state_file(args.state, args.key, trusted=args.trusted)
        verdict = verify_state(
            state,
            _opened(open_dataset(dataset, split=args.split, name=args.name), state),
            world_size=args.world_size,
            micro_batch_size=args.micro_batch_size,
            num_workers=args.num_workers,
            show=args.show,
            repeat=not args.no_repeat,
            task_encoder=args.task_encoder,
            trusted=args.trusted,
            seed=args.seed,
            global_batch_size=args.global_batch_size,
            allow_batch_size_change=args.allow_batch_size_change,
        )
        say(
            json.dumps(verdict, indent=2, default=str)
            if args.json
            else format_verdict(verdict, args.world_size, args.micro_batch_size)
        )
        return 0 if verdict["ok"] else 1
    if args.command == "preview":
        from .preview import format_preview, nothing_written, open_for_preview, pick, preview

        if args.count < 1:
            parser.error(f"--count={args.count} must be at least 1")
        if args.image_decode is not None and not args.decode:
            parser.error(f"--image-decode {args.image_decode} decodes images: add --decode")
        source = open_for_preview(args.dataset, split=args.split, decode=args.decode, image_decode=args.image_decode)
        chosen = pick(source, args.index, args.key, args.count, progress=not args.quiet)
        out = Path(args.out) if args.out else None
        shown, images, sheet = preview(source, chosen, out)
        note = nothing_written(out, decoded=args.decode) if out is not None and not images else None
        if args.json:
            files = {"images": [str(p) for p in images], "contact_sheet": None if sheet is None else str(sheet)}
            written = [*files["images"], *([files["contact_sheet"]] if sheet else [])]  # every file, sheet last
            say(json.dumps({"samples": shown, **files, "written": written, "note": note}, indent=2))
        else:
            say(format_preview(source.name, shown, images, sheet) + (f"\n{note}" if note else ""))
        return 0
    if args.command == "plot":
        from ..blend import open_dataset
        from ..loader import Loader
        from ..reel.packing import Packing
        from .plot import draw, stream_shares, summary
        from .verify import _KeysOnly

        if args.steps < 1:
            parser.error(f"--steps={args.steps} must be at least 1")
        packing = None
        if args.max_length is not None:
            extra = {} if args.window is None else {"window": args.window}
            packing = Packing(max_length=args.max_length, length=args.length, **extra)
        loader = Loader(
            open_dataset(args.dataset, split=args.split),
            global_batch_size=args.global_batch_size,
            micro_batch_size=args.global_batch_size,
            world_size=1,
            rank=0,
            seed=args.seed,
            packing=packing,
            task_encoder=_KeysOnly() if packing is not None else None,
        )
        shares = stream_shares(loader, args.steps, progress=not args.quiet)
        draw(shares, Path(args.out), Path(args.dataset).name)
        say("\n".join([*summary(shares), f"wrote {args.out}"]))
        return 0
    return 2
