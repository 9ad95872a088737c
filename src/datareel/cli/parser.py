"""The ``datareel`` command line: its parser (building it imports nothing heavy, so ``--help`` and argument
errors answer at once) and the arguments commands share."""

from __future__ import annotations

import argparse
import json
from typing import Any

DEBUG_HELP = "show the full traceback of an error"
QUIET_HELP = "no progress bars or phase lines on stderr (the results on stdout are unchanged)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="datareel", description="Elastic, deterministic data loading for PyTorch.")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    # the same flags after the command's name; SUPPRESS: absent there, they keep the value given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    common.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_subparser(common))
    parser.set_defaults(commands=commands.choices)  # each command's parser, for its own argument errors
    demo = commands.add_parser(
        "demo",
        help="checkpoint on 4 ranks × 2 workers, resume on 3 × 1 and 2 × 0, compare with an uninterrupted run",
    )
    demo.add_argument("--samples", type=int, default=100, help="dataset size (default 100)")
    demo.add_argument("--seed", type=int, default=1234, help="reel seed (default 1234)")
    demo.add_argument(
        "--distributed",
        action="store_true",
        help="run each phase as real processes joined by torch.distributed (gloo on 127.0.0.1)",
    )
    demo.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="keep the dataset and the checkpoint in DIR (new or empty) and print commands to try on them",
    )
    prepare = commands.add_parser(
        "prepare",
        help="index WebDataset shards (a directory) or a .jsonl file into Energon's format",
    )
    prepare.add_argument("path", help="directory of *.tar shards, or a .jsonl file")
    prepare.add_argument(
        "--split-ratio",
        default="1,0,0",
        help="shares of train,val,test (or name:share,...) cut by shard (default 1,0,0)",
    )
    prepare.add_argument(
        "--sample-type",
        default="CrudeWebdataset",
        help="CrudeWebdataset (default) or an Energon sample type, e.g. CaptioningSample",
    )
    prepare.add_argument(
        "--field-map", default=None, help='JSON field -> part map, e.g. \'{"image": "jpg", "caption": "txt"}\''
    )
    prepare.add_argument(
        "--lengths",
        default=None,
        metavar="MODULE:FUNCTION",
        help="also compute a length index: FUNCTION(decoded sample) -> int, for packing and "
        "filters (on an already prepared dataset, only the length index is computed)",
    )
    prepare.add_argument("--workers", type=int, default=None, help="parallel indexing processes (default: cores)")
    prepare.add_argument("--overwrite", action="store_true", help="replace an existing .nv-meta")
    info = commands.add_parser(
        "info",
        help="splits, shards, samples, bytes and sample type of a prepared dataset; a metadataset's datasets",
    )
    info.add_argument("path", help="a prepared directory, a .jsonl file or a metadataset YAML")
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inspect = commands.add_parser(
        "inspect",
        help="what a saved loader state says (cursor, global batch, spec) and which world and micro-batch sizes "
        "can resume it",
    )
    _state_file_arguments(inspect)
    _dataset_arguments(inspect, "(optional) the job's dataset: also each source's epoch and offset at the cursor")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    for flag, what in (
        ("--shuffle-buffer-size", "shuffle_buffer_size"),
        ("--max-samples-per-sequence", "max_samples_per_sequence"),
        ("--parallel-shard-iters", "parallel_shard_iters"),
    ):
        inspect.add_argument(
            flag,
            type=int,
            default=None,
            help=f"(a megatron.energon checkpoint) the old job's {what}, to find its remainder",
        )
    verify = commands.add_parser(
        "verify",
        help="restore a loader state on a topology, as the job would: OK with the next global batches' keys per "
        "rank, or the error the job would hit (exit 0 / 1)",
    )
    _state_file_arguments(verify)
    _dataset_arguments(verify, "the job's dataset")
    verify.add_argument("--world-size", type=int, required=True, help="ranks of the job that resumes the state")
    verify.add_argument(
        "--micro-batch-size",
        type=int,
        required=True,
        help="that job's micro_batch_size (times --world-size, it must divide the rest of the global batch)",
    )
    verify.add_argument(
        "--num-workers", type=int, default=0, help="that job's DataLoader workers per rank (default 0; any count)"
    )
    verify.add_argument("--show", type=int, default=2, help="global batches to list (default 2)")
    verify.add_argument("--seed", type=int, default=None, help="default: the state's")
    verify.add_argument(
        "--global-batch-size",
        type=_batch_sizes,
        default=None,
        help="default: the state's; an int, or a schedule as JSON: '{\"ramp_up\": [start, increment, samples, "
        "final]}' or '[[from_global_batch, G], ...]'",
    )
    verify.add_argument(
        "--allow-batch-size-change",
        action="store_true",
        help="restore as load_state_dict(state, allow_batch_size_change=True) does (with --global-batch-size)",
    )
    verify.add_argument("--no-repeat", action="store_true", help="the job's loader had repeat=False")
    verify.add_argument("--json", action="store_true", help="print JSON instead of text")
    preview = commands.add_parser(
        "preview", help="show samples of a dataset: fields, types, shapes, text excerpts; save its images"
    )
    preview.add_argument("dataset", help="a prepared directory or a .jsonl file")
    preview.add_argument("--index", type=int, action="append", default=[], help="sample index (repeatable)")
    preview.add_argument("--key", default=None, help="the sample with this key (scans the dataset)")
    preview.add_argument("--count", type=int, default=3, help="samples from the start when no --index / --key")
    preview.add_argument("--split", default="train", help="split of a prepared directory (default train)")
    preview.add_argument(
        "--decode",
        action="store_true",
        help="decode parts exactly as a Loader over open_dataset(DATASET) hands them out (images: --image-decode)",
    )
    preview.add_argument(
        "--image-decode",
        default=None,
        metavar="MODE",
        help="with --decode: the image_decode the job passes open_dataset (pil, rgb8, torchrgb8, ..., none: "
        "bytes); default open_dataset's own (torchrgb: float CHW tensors in [0, 1])",
    )
    preview.add_argument(
        "--out",
        default=None,
        help="folder for the image parts (PNGs of their pixels; with --decode, of the decoded values) and a "
        "contact sheet",
    )
    preview.add_argument("--json", action="store_true", help="print JSON instead of text")
    plot = commands.add_parser(
        "plot",
        help="draw each source's share of the global batches (a blend), its epochs and the pack fill "
        "(needs matplotlib, the [plot] extra)",
    )
    plot.add_argument("dataset", help="a prepared directory, a .jsonl file or a metadataset YAML")
    plot.add_argument("--global-batch-size", type=int, required=True, help="the job's global_batch_size")
    plot.add_argument("--steps", type=int, required=True, help="global batches to walk")
    plot.add_argument("--out", required=True, help="the PNG to write")
    plot.add_argument("--seed", type=int, default=0, help="the job's Loader seed (default 0)")
    plot.add_argument("--split", default="train", help="split of a prepared directory (default train)")
    plot.add_argument("--max-length", type=int, default=None, help="with packing: datareel.Packing(max_length=...)")
    plot.add_argument("--length", default="index", help="with packing: index (default) or bytes")
    plot.add_argument("--window", type=int, default=None, help="with packing: the planning window")
    return parser


def _subparser(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """The class of the commands' parsers: each one also takes ``common``'s flags (``--debug``, ``--quiet``)."""

    class Command(argparse.ArgumentParser):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "parents": [*kwargs.get("parents", ()), common]})

    return Command


def _dataset_arguments(command: argparse.ArgumentParser, what: str) -> None:
    """The job's dataset, for ``inspect`` and ``verify`` alike: ``DATASET`` after the state, or ``--dataset``."""
    kinds = "a prepared directory, a .jsonl file or a metadataset YAML"
    command.add_argument("dataset", nargs="?", default=None, help=f"{what}: {kinds}")
    command.add_argument(
        "--dataset", dest="dataset_option", metavar="DATASET", default=None, help="the same, as an option"
    )
    command.add_argument("--split", default="train", help="split of a prepared directory (default train)")
    command.add_argument("--name", default=None, help="the name the job gave open_dataset, if any")


def _state_file_arguments(command: argparse.ArgumentParser) -> None:
    """The arguments naming a saved loader state (``inspect``, ``verify``): the file, its key, trust."""
    command.add_argument("state", help="a JSON file, a torch.save file holding the state, or a DCP directory")
    command.add_argument("--key", default=None, help="dotted key of the state in the file, e.g. loader or extra.0")
    command.add_argument(
        "--trusted",
        action="store_true",
        help="trust the file (both run its code): unpickle it fully (a torch.save file, a DCP .metadata), and "
        "import the task encoder or length function its state names. Trusted files only",
    )
    command.add_argument(
        "--task-encoder",
        default=None,
        metavar="MODULE:CLASS",
        help="the job's encoder, for a state of a windowed stage (imported; the state's own only with --trusted)",
    )


def _batch_sizes(text: str) -> Any:
    """``--global-batch-size``: an int, ``{"ramp_up": [...]}`` or ``[[from_global_batch, G], ...]`` (JSON)."""
    from ..errors import OptionError
    from ..plan.schedule import BatchSchedule, rule_from_json

    try:
        return BatchSchedule(rule_from_json(json.loads(text)))
    except (ValueError, TypeError, OptionError) as exc:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a global batch size: give an int, \'{{"ramp_up": [start, increment, samples, '
            f"final]}}' or '[[from_global_batch, G], ...]' ({exc})"
        ) from None
