"""The ``datareel`` command as a newcomer meets it: output that survives a reader closing the pipe at any
moment (buffered or not), ``--debug`` and ``--quiet`` before or after any command, help and argument errors
without torch, the job's dataset given the same way to ``inspect`` and ``verify``, the demo's phases shown as
they run, ``preview`` decoding exactly as the Loader does, ``plot`` on one dataset drawing what there is to
see, and ``info`` suggesting only commands that work."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import datareel
from datareel.cli import _parser, main
from datareel.cli import demo as demo_module
from datareel.cli.prepare import prepare_webdataset
from datareel.errors import DatasetError
from wds_helpers import build_shards, sample_parts

COMMANDS = ("demo", "prepare", "info", "inspect", "verify", "preview", "plot")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A prepared JSONL dataset and a state a loader over it saved after one global batch."""
    root = tmp_path_factory.mktemp("job")
    data = root / "ids.jsonl"
    data.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(40)))
    assert main(["prepare", str(data)]) == 0
    loader = datareel.Loader(datareel.open_dataset(str(data)), global_batch_size=8, micro_batch_size=8)
    next(iter(loader))
    (root / "state.json").write_text(json.dumps(loader.state_dict()))
    return root / "state.json", data


# --- a reader that closes the pipe ------------------------------------------------------------------------


class ClosesAfterFirstWrite(io.StringIO):
    """A stdout whose reader takes the first write and closes: every later write is a broken pipe."""

    def __init__(self, fd: int):
        super().__init__()
        self.writes, self.fd = 0, fd

    def write(self, text):
        self.writes += 1
        if self.writes > 1:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)

    def fileno(self):
        return self.fd


@pytest.mark.parametrize("command", ["info", "inspect", "verify", "verify-json"])
def test_each_answer_leaves_in_one_write_so_a_reader_closing_after_it_misses_nothing(
    job, tmp_path, monkeypatch, capsys, command
):
    """The cause of the flaky pipe test: ``print`` writes text and newline apart (two writes when stdout is
    unbuffered); a reader that read the answer and closed then turned a complete answer into exit 141."""
    state, data = job
    argv = {
        "info": ["info", str(data)],
        "inspect": ["inspect", str(state), str(data), "--json"],
        "verify": ["verify", str(state), str(data), "--world-size", "2", "--micro-batch-size", "2"],
        "verify-json": ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "4", "--json"],
    }[command]
    with open(tmp_path / "sink", "w") as sink:
        out = ClosesAfterFirstWrite(sink.fileno())
        monkeypatch.setattr(sys, "stdout", out)
        code = main(argv)
        monkeypatch.undo()
    assert code == 0 and out.writes == 1 and out.getvalue().endswith("\n"), (code, out.writes)
    assert capsys.readouterr().err == ""


class ShortWrites(io.RawIOBase):
    """An unbuffered stdout's file that takes at most 100 bytes a write (as a pipe does when interrupted) and,
    with ``fail_after``, breaks after that many writes (the reader closed mid-answer)."""

    def __init__(self, fd: int, fail_after: int | None = None):
        super().__init__()
        self.fd, self.fail_after, self.got, self.calls = fd, fail_after, bytearray(), 0

    def writable(self):
        return True

    def write(self, data):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise BrokenPipeError(32, "Broken pipe")
        chunk = bytes(data[:100])
        self.got += chunk
        return len(chunk)

    def fileno(self):
        return self.fd


@pytest.mark.parametrize("fail_after", [None, 3], ids=["all-read", "reader-closes"])
def test_unbuffered_short_writes_neither_lose_the_answer_nor_pass_for_it(job, tmp_path, monkeypatch, fail_after):
    """PYTHONUNBUFFERED: the text layer writes straight to the file and drops what a short write leaves; the
    answer must arrive whole, or the command must end with 141 (never 0 with part of the answer)."""
    state, data = job
    argv = ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "1", "--show", "4"]
    assert main([*argv, "--json"]) == 0  # the whole answer, for reference
    with open(tmp_path / "sink", "w") as sink:
        raw = ShortWrites(sink.fileno(), fail_after)
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
        code = main([*argv, "--json"])
        monkeypatch.undo()
    if fail_after is None:
        assert code == 0 and json.loads(raw.got.decode())["ok"] and raw.got.endswith(b"}\n")
    else:
        assert code == 141 and len(raw.got) == 300


def _gone_reader_run(argv: list[str], unbuffered: bool) -> tuple[int, str]:
    """Run ``datareel ARGV`` with stdout a pipe whose reader closed before the command started."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone: the first write (or the final flush) meets a broken pipe
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "datareel", *argv], stdout=write, stderr=subprocess.PIPE, env=env, timeout=120
        )
    finally:
        os.close(write)
    return proc.returncode, proc.stderr.decode()


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", ["info", "inspect", "verify"])
def test_a_reader_gone_before_the_first_byte_ends_every_command_quietly(job, command, unbuffered):
    """Buffered, a short answer is written only by the last flush: that broken pipe is the quiet 141 too
    (it was the interpreter's 'Exception ignored ... BrokenPipeError' and exit 120)."""
    state, data = job
    argv = {
        "info": ["info", str(data)],
        "inspect": ["inspect", str(state), "--dataset", str(data)],
        "verify": ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "8"],
    }[command]
    code, err = _gone_reader_run(argv, unbuffered)
    assert (code, err) == (141, ""), (code, err)


# --- --debug and --quiet anywhere ------------------------------------------------------------------------


def _minimal(command: str, job) -> list[str]:
    state, data = job
    return {
        "demo": ["demo"],
        "prepare": ["prepare", str(data)],
        "info": ["info", str(data)],
        "inspect": ["inspect", str(state)],
        "verify": ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "8"],
        "preview": ["preview", str(data)],
        "plot": ["plot", str(data), "--global-batch-size", "8", "--steps", "2", "--out", "x.png"],
    }[command]


@pytest.mark.parametrize("command", COMMANDS)
def test_debug_and_quiet_are_accepted_before_and_after_every_command(job, command):
    argv = _minimal(command, job)
    parser = _parser()
    for before, after in (([], []), (["--debug", "--quiet"], []), ([], ["--debug", "--quiet"])):
        args = parser.parse_args([*before, argv[0], *argv[1:], *after])
        expected = bool(before or after)
        assert (args.debug, args.quiet) == (expected, expected), (before, after)
    args = parser.parse_args(["--debug", *argv, "--quiet"])  # one before, one after: both kept
    assert (args.debug, args.quiet) == (True, True)


def test_debug_after_the_command_shows_the_traceback(tmp_path, capsys):
    missing = str(tmp_path / "missing.jsonl")
    assert main(["info", missing]) == 1 and "does not exist" in capsys.readouterr().err
    for argv in (["info", missing, "--debug"], ["--debug", "info", missing]):
        with pytest.raises(DatasetError, match="does not exist"):
            main(argv)


# --- help and argument errors without torch ----------------------------------------------------------------

LAZY_PROBE = """
import contextlib, io, json, sys
from datareel.cli import main
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
print(json.dumps(sorted(m for m in ("torch", "matplotlib", "datareel.loader") if m in sys.modules)))
"""


@pytest.mark.slow
def test_help_and_argument_errors_import_no_torch():
    argvs = [
        ["--help"],
        *[[command, "--help"] for command in COMMANDS],
        [],  # no command
        ["bogus"],
        ["verify", "state.json"],  # --world-size missing
        ["plot", "d.jsonl", "--global-batch-size", "x", "--steps", "1", "--out", "o.png"],
        ["verify", "s.json", "d", "--world-size", "1", "--micro-batch-size", "1", "--global-batch-size", "[1"],
        ["inspect", "s.json", "--debug", "--nope"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE, json.dumps(argvs)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [], proc.stdout
    proc = subprocess.run(  # the installed entry point's module, as `datareel --help` runs it
        [sys.executable, "-X", "importtime", "-m", "datareel", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "usage: datareel" in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import")}
    assert "datareel.cli" in imported and "torch" not in imported


def _every_parser(parser, path=("datareel",)):
    """``(command path, parser)`` for the top-level parser and each command's, at any depth."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_parser(sub, (*path, name))


def test_every_option_and_argument_of_every_command_has_help_text():
    """`datareel verify --help` listed --world-size, --micro-batch-size and --num-workers bare, `plot --help`
    --global-batch-size and --seed: every argument of every command (and every command) says what it is."""
    import argparse

    missing, commands = [], 0
    for path, parser in _every_parser(_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    commands += 1
                    if not (choice.help or "").strip():
                        missing.append(f"{' '.join(path)} {choice.dest} (the command)")
            elif not (action.help or "").strip():
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert commands == len(COMMANDS)
    assert missing == [], missing


def test_the_package_still_gives_every_public_name():
    for name in datareel.__all__:
        assert getattr(datareel, name) is not None
    assert set(datareel.__all__) <= set(dir(datareel))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        datareel.Nope  # noqa: B018


# --- the job's dataset, given the same way ----------------------------------------------------------------


def test_inspect_and_verify_take_the_dataset_as_a_positional_or_as_dataset(job, capsys):
    state, data = job

    def run(*argv):
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    positional = run("inspect", state, data, "--json")
    option = run("inspect", state, "--dataset", data, "--json")
    assert positional == option and positional[0] == 0 and "per_source" in json.loads(positional[1])
    topology = ("--world-size", 2, "--micro-batch-size", 2)
    positional = run("verify", state, data, *topology)
    option = run("verify", state, "--dataset", data, *topology)
    assert positional == option and positional[0] == 0 and positional[1].startswith("OK")
    for argv in (
        ["inspect", state, data, "--dataset", state],  # two different datasets
        ["verify", state, *topology],  # no dataset at all
        ["inspect", state, "--split", "val"],  # a split of no dataset
    ):
        with pytest.raises(SystemExit) as stopped:
            run(*argv)
        assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "given twice" in err and "needs the job's dataset" in err and "give the dataset too" in err


# --- the demo shows its phases --------------------------------------------------------------------------


@pytest.mark.workers
@pytest.mark.parametrize("distributed", [False, True], ids=["simulated", "distributed"])
def test_the_demo_announces_each_phase_as_it_starts_and_ends(monkeypatch, capsys, distributed):
    if distributed:  # the CLI path of --distributed, with the phases run in this process (a real run: ~90 s)
        monkeypatch.setattr(demo_module, "run_phase_distributed", demo_module.run_phase_local)
    assert main(["demo", "--samples", "30", *(["--distributed"] if distributed else [])]) == 0
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.startswith("datareel demo: [")]
    assert len(lines) == 8, out.err
    for n in range(1, 5):
        assert lines[2 * n - 2].startswith(f"datareel demo: [{n}/4] ") and lines[2 * n - 2].endswith(" ...")
        assert re.fullmatch(rf"datareel demo: \[{n}/4\] done in \d+\.\d s", lines[2 * n - 1])
    assert ("real processes" in lines[2]) == distributed and "4 ranks × 2 workers" in lines[2]
    assert "resume on 3 ranks × 1 workers" in lines[4] and "resume on 2 ranks × 0 workers" in lines[6]
    assert "PASS" in out.out
    assert main(["demo", "--samples", "30", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


# --- preview --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A crude dataset (txt, json, png, npy parts) and a typed captioning one of the same samples."""
    root = tmp_path_factory.mktemp("usability-preview")
    build_shards(root / "crude", shard_sizes=(3, 2), long_names=False)
    prepare_webdataset(root / "crude", progress=False)
    build_shards(root / "typed", shard_sizes=(3,), long_names=False)
    prepare_webdataset(root / "typed", sample_type="CaptioningSample", field_map={"image": "png", "caption": "txt"},
                       progress=False)  # fmt: skip
    return root


class Samples:
    """Hands out each sample as the Loader gives it to encode_sample (one per micro-batch)."""

    def batch(self, samples):
        return list(samples)


def _loader_samples(path) -> dict[str, object]:
    source = datareel.open_dataset(path)
    loader = datareel.Loader(source, global_batch_size=1, micro_batch_size=1, task_encoder=Samples(), repeat=False)
    out = {}
    for (sample,) in loader:
        key = sample["__key__"] if isinstance(sample, dict) else sample.__key__
        out[key] = sample
    assert len(out) == len(source)
    return out


def _fields(sample) -> dict[str, object]:
    import dataclasses

    return dict(sample) if isinstance(sample, dict) else {f.name: getattr(sample, f.name) for f in
                                                            dataclasses.fields(sample)}  # fmt: skip


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("kind", ["crude", "typed"])
def test_preview_decode_gives_what_the_loader_hands_out(shards, tmp_path, capsys, kind):
    from datareel.cli.preview import describe, open_for_preview, read_as_loaded

    path = shards / kind
    handed = _loader_samples(path)
    source = open_for_preview(str(path), split="train", decode=True)
    for i in range(len(source)):  # the values themselves
        mine = _fields(read_as_loaded(source, i))
        theirs = _fields(handed[mine["__key__"]])
        assert mine.keys() == theirs.keys()
        assert all(_same(mine[k], theirs[k]) for k in mine), (kind, i)
    out_dir = tmp_path / "images"
    assert main(["preview", str(path), "--decode", "--count", "3", "--json", "--out", str(out_dir)]) == 0
    printed = json.loads(capsys.readouterr().out)
    image_field = "png" if kind == "crude" else "image"
    for sample in printed["samples"]:  # what the command prints: the loader's types, dtypes and shapes
        theirs = _fields(handed[sample["key"]])
        assert {name: [kind_, summary] for name, kind_, summary in sample["fields"]} == {
            name: list(describe(value)) for name, value in theirs.items()
        }
        assert sample["fields"][[f[0] for f in sample["fields"]].index(image_field)][1] == "Tensor"
        tensor = theirs[image_field]  # float CHW in [0, 1] (torchrgb, open_dataset's default)
        pixels = (tensor.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        saved = np.asarray(Image.open(out_dir / f"{sample['index']:06d}-{image_field}.png"))
        assert np.array_equal(saved, pixels)
    assert main(["preview", str(path), "--decode", "--image-decode", "pil", "--index", "0", "--json"]) == 0
    fields = {name: kind_ for name, kind_, _ in json.loads(capsys.readouterr().out)["samples"][0]["fields"]}
    assert fields[image_field] == "Image"  # as a job passing image_decode="pil" gets it


def test_preview_out_without_decode_saves_the_image_bytes_or_says_why_nothing_was_written(shards, tmp_path, capsys):
    out_dir = tmp_path / "raw"
    assert main(["preview", str(shards / "typed"), "--count", "2", "--out", str(out_dir), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["note"] is None and [Path(p).name for p in printed["written"]] == [
        "000000-image.png",
        "000001-image.png",
        "contact.png",
    ]  # a typed sample's `image` holds PNG bytes under a name with no extension: found by its first bytes
    for i in range(2):
        expected = np.asarray(Image.open(io.BytesIO(sample_parts(i)["png"])).convert("RGB"))
        assert np.array_equal(np.asarray(Image.open(out_dir / f"{i:06d}-image.png")), expected)
    lines = tmp_path / "texts.jsonl"
    lines.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert main(["prepare", str(lines)]) == 0
    capsys.readouterr()
    empty = tmp_path / "empty"
    assert main(["preview", str(lines), "--out", str(empty)]) == 0
    out = capsys.readouterr().out
    assert f"--out {empty}: nothing written: no part of these samples is image bytes; add --decode" in out
    assert main(["preview", str(lines), "--out", str(empty), "--decode", "--json"]) == 0
    assert "nothing written: no field of these samples is an image" in json.loads(capsys.readouterr().out)["note"]
    assert not empty.exists()
    with pytest.raises(SystemExit):
        main(["preview", str(lines), "--image-decode", "pil"])  # without --decode it would be dropped
    assert "add --decode" in capsys.readouterr().err


# --- plot on one dataset ----------------------------------------------------------------------------------


def test_plot_on_one_dataset_draws_its_epochs_and_says_shares_need_a_blend(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from datareel import Packing
    from datareel.cli.plot import epochs_read, panels, stream_shares

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(30)))
    assert main(["prepare", str(path)]) == 0
    capsys.readouterr()
    out = tmp_path / "one.png"
    assert main(["plot", str(path), "--global-batch-size", "6", "--steps", "12", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "docs.jsonl: the only source, so its share of every global batch is 1 (shares need a blend)" in printed
    assert "72 samples in 12 global batches = 2.40 epochs of its 30 samples (2 new epochs begun)" in printed
    assert np.asarray(Image.open(out)).shape[:2] == (320, 1000)  # one panel: the epochs, not a line at 1.0
    loader = datareel.Loader(datareel.open_dataset(str(path)), global_batch_size=6, micro_batch_size=6)
    shares = stream_shares(loader, 12, False)
    assert panels(shares) == ["epochs read"]
    np.testing.assert_allclose(epochs_read(shares)[:, 0], np.arange(1, 13) * 6 / 30)
    assert shares["epoch_starts"] == [[4, 9]]
    packing = Packing(max_length=40, length="bytes", window=12)
    argv = ["plot", str(path), "--global-batch-size", "4", "--steps", "6", "--out", str(out), "--quiet"]
    assert main([*argv, "--max-length", "40", "--length", "bytes", "--window", "12"]) == 0
    assert "pack fill: mean" in capsys.readouterr().out
    assert np.asarray(Image.open(out)).shape[:2] == (960, 1000)  # epochs, samples per global batch, pack fill
    from datareel.cli.verify import _KeysOnly

    loader = datareel.Loader(datareel.open_dataset(str(path)), global_batch_size=4, micro_batch_size=4,
                             packing=packing, task_encoder=_KeysOnly())  # fmt: skip
    assert panels(stream_shares(loader, 6, False)) == ["epochs read", "samples per global batch", "pack fill"]
    blend = datareel.mix([(datareel.open_dataset(str(path)), 1), (datareel.from_sequence(list(range(5))), 1)])
    shares = stream_shares(datareel.Loader(blend, global_batch_size=6, micro_batch_size=6), 4, False)
    assert panels(shares) == ["share, cumulative", "share per window"]


# --- info suggests only what works --------------------------------------------------------------------------


def _suggested(message: str) -> list[list[str]]:
    """The commands an error message suggests (`datareel COMMAND ARGS`, not a mention of a command's name),
    as argv for main()."""
    return [shlex.split(cmd)[1:] for cmd in re.findall(r"`(datareel \w+ [^`]+)`", message)]


@pytest.mark.workers
def test_info_on_a_metadataset_names_each_dataset_to_prepare_and_those_commands_work(tmp_path, capsys):
    build_shards(tmp_path / "a", shard_sizes=(3, 2), long_names=False)
    build_shards(tmp_path / "b", shard_sizes=(2, 1), long_names=False)
    (tmp_path / "docs.jsonl").write_text('{"t": 1}\n{"t": 2}\n')
    yaml_path = tmp_path / "blend.yaml"
    yaml_path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 1\n        path: a\n      - weight: 2\n        path: b\n"
        "      - weight: 1\n        path: docs.jsonl\n  val:\n    path: b\n"
    )
    assert main(["info", str(yaml_path)]) == 1
    err = capsys.readouterr().err
    assert f"datareel prepare {yaml_path}" not in err and "needs no preparing itself" in err
    assert "splits.train.blend[0]" in err and "splits.train.blend[2]" in err
    commands = _suggested(err)
    assert sorted(c[-1] for c in commands) == sorted(str(tmp_path / p) for p in ("a", "b", "docs.jsonl"))
    for argv in commands:
        assert main([*argv, "--quiet"]) == 0, argv
    assert main(["info", str(yaml_path)]) == 1  # b has no val shards (all its shards went to train)
    err = capsys.readouterr().err
    assert "has an empty split 'val'" in err
    (argv,) = _suggested(err)
    assert main([*argv, "--quiet"]) == 0, argv
    capsys.readouterr()
    assert main(["info", str(yaml_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "metadataset"
    assert [(d["where"], Path(d["path"]).name, d["samples"]) for d in listed["datasets"]] == [
        ("splits.train.blend[0]", "a", 5),
        ("splits.train.blend[1]", "b", len(datareel.open_dataset(tmp_path / "b"))),
        ("splits.train.blend[2]", "docs.jsonl", 2),
        ("splits.val", "b", len(datareel.open_dataset(tmp_path / "b", split="val"))),
    ]
    assert main(["info", str(yaml_path)]) == 0
    assert "splits.train.blend[1]" in capsys.readouterr().out


@pytest.mark.workers
def test_every_path_info_cannot_describe_gets_a_suggestion_that_works_or_none(tmp_path, capsys):
    build_shards(tmp_path / "ds", shard_sizes=(2, 2), long_names=False)
    build_shards(tmp_path / "shard", shard_sizes=(2,), long_names=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "lines.jsonl").write_text('{"t": 1}\n')
    (tmp_path / "notes.txt").write_text("hello")
    cases = {
        "missing": (tmp_path / "nope", "does not exist"),
        "no shards": (tmp_path / "empty", "holds no .tar shards"),
        "other file": (tmp_path / "notes.txt", "is a file, not a dataset"),
        "a shard": (tmp_path / "shard" / "parts" / "data-0.tar", "is one shard"),
        "unindexed jsonl": (tmp_path / "lines.jsonl", "is not indexed"),
        "unprepared": (tmp_path / "ds", "not a prepared dataset"),
    }
    for name, (path, why) in cases.items():
        assert main(["info", str(path)]) == 1, name
        err = capsys.readouterr().err
        assert why in err, (name, err)
        for argv in _suggested(err):  # every command suggested works, and then info describes the dataset
            assert main([*argv, "--quiet"] if argv[0] == "prepare" else argv) == 0, (name, argv)
            capsys.readouterr()
            target = argv[-1]
            assert main(["info", target]) == 0, (name, target)
            capsys.readouterr()
        assert bool(_suggested(err)) == (name in ("a shard", "unindexed jsonl", "unprepared")), name
    assert main(["info", str(tmp_path / "ds" / "parts")]) == 1  # inside a prepared dataset: info that one
    assert _suggested(capsys.readouterr().err) == [["info", str((tmp_path / "ds").resolve())]]


def test_info_follows_nested_and_legacy_metadatasets_and_bounds_hostile_ones(tmp_path, capsys):
    lines = tmp_path / "docs.jsonl"
    lines.write_text('{"t": 1}\n{"t": 2}\n{"t": 3}\n')
    assert main(["prepare", str(lines)]) == 0
    head = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
    (tmp_path / "inner.yaml").write_text(head + "  train:\n    path: docs.jsonl\n")
    (tmp_path / "top.yaml").write_text(
        head + "  train:\n    blend:\n      - weight: 1\n        path: inner.yaml\n      - weight: 1\n"
        "        path: docs.jsonl\n"
    )
    (tmp_path / "legacy.yaml").write_text(
        "__module__: megatron.energon\n__class__: Metadataset\nsplits:\n  train:\n    datasets:\n"
        "      - weight: 1\n        path: docs.jsonl\n"
    )
    capsys.readouterr()
    assert main(["info", str(tmp_path / "top.yaml"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["datasets"]
    assert [(Path(d["yaml"]).name, d["where"], d["samples"]) for d in listed] == [
        ("inner.yaml", "splits.train", 3),
        ("top.yaml", "splits.train.blend[1]", 3),
    ]
    assert main(["info", str(tmp_path / "legacy.yaml"), "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)["datasets"]
    assert (only["where"], only["samples"]) == ("splits.train.blend[0]", 3)
    (tmp_path / "a.yaml").write_text(head + "  train:\n    path: b.yaml\n")
    (tmp_path / "b.yaml").write_text(head + "  train:\n    path: a.yaml\n")
    assert main(["info", str(tmp_path / "a.yaml")]) == 1
    assert "include each other in a cycle" in capsys.readouterr().err
    for level in range(6):  # each file includes the next ten times: 10^6 entries, refused past 100,000
        target = f"level{level + 1}.yaml" if level < 5 else "docs.jsonl"
        items = "".join(f"      - weight: 1\n        path: {target}\n" for _ in range(10))
        (tmp_path / f"level{level}.yaml").write_text(head + "  train:\n    blend:\n" + items)
    assert main(["info", str(tmp_path / "level0.yaml")]) == 1
    assert "more than 100,000 blends and datasets" in capsys.readouterr().err


# --- errors in the command line's words --------------------------------------------------------------------


def test_a_split_the_dataset_lacks_is_named_as_the_split_flag(shards, job, capsys):
    """The library's "pass one of them as split=" reads "as --split" on the command line."""
    state, _ = job
    for argv in (
        ["preview", str(shards / "crude"), "--split", "nosuch"],
        ["inspect", str(state), str(shards / "crude"), "--split", "nosuch"],
        ["plot", str(shards / "crude"), "--split", "nosuch", "--global-batch-size", "2", "--steps", "1", "--out", "x"],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "split 'nosuch' is not in" in err and err.rstrip().endswith("pass one of them as --split"), err
        assert "split=" not in err


def test_an_image_decode_the_library_refuses_is_named_as_the_flag(shards, capsys):
    assert main(["preview", str(shards / "crude"), "--decode", "--image-decode", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert "--image-decode 'nosuch' is not one of" in err and "image_decode=" not in err, err


def _argument_errors(job, tmp_path) -> list[list[str]]:
    """One argv for each argument error each command reports itself (after argparse's own checks)."""
    state, data = job
    return [
        ["demo", "--samples", "0"],
        ["prepare", str(tmp_path), "--field-map", "{"],
        ["prepare", "s3://bucket/data.jsonl"],
        ["inspect", str(state), "--split", "val"],
        ["inspect", str(state), str(data), "--dataset", str(tmp_path)],
        ["verify", str(state), "--world-size", "1", "--micro-batch-size", "8"],
        ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "8", "--show", "0"],
        ["verify", str(state), str(data), "--world-size", "1", "--micro-batch-size", "8", "--allow-batch-size-change"],
        ["preview", str(data), "--count", "0"],
        ["preview", str(data), "--image-decode", "pil"],
        ["plot", str(data), "--global-batch-size", "8", "--steps", "0", "--out", "x.png"],
    ]


def test_each_commands_argument_errors_show_that_commands_usage(job, tmp_path, capsys):
    """`datareel preview DIR --count 0` printed the top-level usage (``datareel [-h] ... {demo,...}``) over
    its error: each command's own checks report with the command's parser, as argparse's checks do."""
    for argv in _argument_errors(job, tmp_path):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2, (argv, err)
        assert f"usage: datareel {argv[0]} " in err and f"datareel {argv[0]}: error: " in err, (argv, err)
        assert "{demo," not in err, (argv, err)
