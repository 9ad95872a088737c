"""Configuration read up front (issue 36, item 5): every ``DATAREEL_*`` variable datareel reads is in one
registry (:data:`datareel.settings.SETTINGS`); each, set to a value it refuses, is reported by name, value and
fix when the Loader is made, before any batch (not swallowed by the prefetch or fetch-ahead that uses it);
and a hint path fails a batch neither for a transient I/O error nor hides a configuration error."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

import datareel
from datareel import OptionError
from datareel.cli.prepare import prepare_webdataset
from datareel.formats.webdataset import kept
from datareel.settings import SETTINGS, check_environment
from datareel.storage import handles, node_cache
from wds_helpers import write_shard

SRC = Path(datareel.__file__).parent


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No DATAREEL_* variable set but a node cache directory of the test's own, and no per-process cache made
    from an earlier environment."""
    for setting in SETTINGS:
        monkeypatch.delenv(setting.name, raising=False)
    monkeypatch.setenv("DATAREEL_NODE_CACHE", str(tmp_path / "node"))  # not the system temp dir's
    for per_process in (handles._PER_PROCESS, kept._PER_PROCESS, node_cache._PER_PROCESS):
        per_process.clear()
    yield
    for per_process in (handles._PER_PROCESS, kept._PER_PROCESS, node_cache._PER_PROCESS):
        per_process.clear()


def test_every_variable_read_in_src_is_in_the_registry():
    used = set()
    for path in SRC.rglob("*.py"):
        used |= set(re.findall(r"\bDATAREEL_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert used == {s.name for s in SETTINGS}, "register each DATAREEL_* variable in datareel/settings.py"


def test_every_variable_is_listed_in_the_operating_docs():
    docs = (SRC.parents[1] / "docs" / "operating.md").read_text()
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in docs]
    assert not missing, f"docs/operating.md does not list {missing}"


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_a_bad_value_is_reported_when_the_loader_is_made(fresh, monkeypatch, texts, setting):
    """Reported before any batch: by the Loader (all checks, naming docs/operating.md), or already when the
    dataset is opened where opening it reads the variable."""
    monkeypatch.setenv(setting.name, setting.refused)
    with pytest.raises(OptionError) as raised:
        datareel.Loader(datareel.from_sequence(list(range(8))), global_batch_size=4, micro_batch_size=4)
    text = str(raised.value)
    assert f"{setting.name}={setting.refused!r}" in text or f"{setting.name} is {setting.refused!r}" in text
    assert "docs/operating.md" in text
    with pytest.raises(OptionError, match=setting.name):
        datareel.Loader(datareel.open_dataset(texts), global_batch_size=4, micro_batch_size=4)
    monkeypatch.delenv(setting.name)
    check_environment()  # and nothing else was wrong


def test_all_bad_values_are_reported_at_once(fresh, monkeypatch):
    for setting in SETTINGS:
        monkeypatch.setenv(setting.name, setting.refused)
    with pytest.raises(OptionError) as raised:
        datareel.Loader(list(range(8)), global_batch_size=4, micro_batch_size=4)
    # one line per check (the three DATAREEL_REMOTE_* share one parser, which names the first it refuses)
    checks: dict[str, str] = {}
    for setting in SETTINGS:
        checks.setdefault(setting.check, setting.name)
    assert all(name in str(raised.value) for name in checks.values())
    assert str(raised.value).count("\n  - ") == len(checks)


def test_good_values_and_defaults_pass(fresh, monkeypatch, tmp_path):
    check_environment()
    good = {
        "DATAREEL_MAX_OPEN_SHARDS": "8",
        "DATAREEL_BLOCK_CACHE_BYTES": "0",
        "DATAREEL_LOOKAHEAD_BYTES": "1048576",
        "DATAREEL_NODE_CACHE": str(tmp_path / "not-yet" / "made"),
        "DATAREEL_NODE_CACHE_BYTES": "1000000",
        "DATAREEL_MAX_DECOMPRESSED": "4GiB",
        "DATAREEL_REMOTE_ATTEMPTS": "3",
        "DATAREEL_REMOTE_TIMEOUT": "5",
        "DATAREEL_REMOTE_DEADLINE": "none",
        "DATAREEL_REMOTE_CONCURRENCY": "16",
        "DATAREEL_S3_CLIENT": "msc",
    }
    assert set(good) == {s.name for s in SETTINGS}
    for name, value in good.items():
        monkeypatch.setenv(name, value)
    check_environment()
    assert not (tmp_path / "not-yet").exists()  # checked, not made
    monkeypatch.setenv("DATAREEL_NODE_CACHE", "off")
    check_environment()


# -- hint paths ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def blocks_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hints")
    for s in range(3):
        write_shard(root / f"s{s}.tar", [(f"h{s}_{j:02d}", {"bin": bytes([j]) * 256}) for j in range(16)])
    prepare_webdataset(root, progress=False)
    return root


class Keys:
    def encode_sample(self, sample):
        return {"key": sample["__key__"]}


def _bucket_like(root):
    """The dataset as a source in a bucket says it is (prefetches, fetches ahead); the local store serves it."""
    data = datareel.open_dataset(root, decode=False)
    data.prefetches = True
    return data


def _keys(data, steps=8):
    loader = datareel.Loader(
        data, global_batch_size=8, micro_batch_size=4, seed=2, task_encoder=Keys(),
        shuffle=datareel.BlockShuffle(block=4),
    )  # fmt: skip
    assert loader._driver.maker.lookahead is not None
    it = iter(loader)
    try:
        return [next(it)["key"] for _ in range(steps)], loader.state_dict()["cursor"]
    finally:
        loader.close()


def test_a_transient_io_error_in_the_hints_fails_no_batch(fresh, blocks_root, monkeypatch):
    expected = _keys(_bucket_like(blocks_root))
    from datareel.storage.local import LocalFiles

    def flaky(self, wanted):
        raise OSError(errno.EIO, "Input/output error (injected: the prefetch and every fetch ahead)")

    monkeypatch.setattr(LocalFiles, "read_ranges", flaky)
    assert _keys(_bucket_like(blocks_root)) == expected  # each sample read alone, by the read


@pytest.mark.parametrize(
    "name", ["DATAREEL_LOOKAHEAD_BYTES", "DATAREEL_BLOCK_CACHE_BYTES", "DATAREEL_NODE_CACHE_BYTES"]
)
def test_a_configuration_error_inside_a_hint_is_raised_not_swallowed(fresh, blocks_root, monkeypatch, name):
    """The variables are checked when the Loader is made; one that turns bad after (read first by a hint:
    the prefetch, the fetch ahead, the node cache) stops the run naming it, instead of the feature going off
    without a word."""
    loader = datareel.Loader(
        _bucket_like(blocks_root), global_batch_size=8, micro_batch_size=4, seed=2, task_encoder=Keys(),
        shuffle=datareel.BlockShuffle(block=4),
    )  # fmt: skip
    monkeypatch.setenv(name, "lots")
    with pytest.raises(datareel.DatareelError, match=f"{name}='lots'"):
        it = iter(loader)
        for _ in range(4):
            next(it)
    loader.close()


def test_the_issue_cases_are_reported_before_training(fresh, monkeypatch, blocks_root):
    for name in ("DATAREEL_BLOCK_CACHE_BYTES", "DATAREEL_NODE_CACHE_BYTES", "DATAREEL_LOOKAHEAD_BYTES"):
        monkeypatch.setenv(name, "lots")
        with pytest.raises(OptionError, match=f"{name}='lots'"):
            _keys(_bucket_like(blocks_root), steps=1)
        monkeypatch.delenv(name)
    assert _keys(_bucket_like(blocks_root), steps=2)[1] == 8


# Unicode digits: str.isdigit() takes '²' and '٣', int() refuses '²' (a bare ValueError) and float()/int() read
# '٣' as 3. A number in a setting, a multiplier or a --key path is ASCII digits; anything else is refused by name.
NON_ASCII_DIGITS = ("²", "٣", "١٢", " ² ")
TEXT = ("DATAREEL_NODE_CACHE", "DATAREEL_S3_CLIENT", "DATAREEL_MAX_DECOMPRESSED")  # the last: formats' parser
NUMBERED = [s for s in SETTINGS if s.name not in TEXT]


@pytest.mark.parametrize("value", NON_ASCII_DIGITS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_a_non_ascii_digit_is_refused_by_name(fresh, monkeypatch, tmp_path, setting, value):
    """Each registered variable: '²' is never a bare ValueError (the named OptionError, or a value the setting
    reads as text, e.g. a directory name); a number setting refuses every non-ASCII digit."""
    monkeypatch.chdir(tmp_path)  # DATAREEL_NODE_CACHE=² is a directory name, made here
    monkeypatch.setenv(setting.name, value)
    try:
        datareel.Loader(list(range(10)), global_batch_size=2, micro_batch_size=2, rank=0, world_size=1)
    except OptionError as exc:
        assert setting.name in str(exc) and value.strip() in str(exc)
    else:
        assert setting not in NUMBERED, f"{setting.name}={value!r} was read as a number"


@pytest.mark.parametrize("setting", NUMBERED, ids=[s.name for s in NUMBERED])
def test_ascii_digits_with_spaces_are_read_where_spaces_are_stripped(fresh, monkeypatch, setting):
    monkeypatch.setenv(setting.name, "12")
    check_environment()
    monkeypatch.setenv(setting.name, " 12 ")
    try:
        check_environment()
    except OptionError as exc:  # the settings that do not strip refuse it by name, never a bare ValueError
        assert f"{setting.name}=' 12 '" in str(exc)


@pytest.mark.parametrize("value", ["²", "-²", "٣", "--3"])
def test_a_multiplier_string_of_non_ascii_digits_is_refused_by_name(value):
    from datareel.energon.multiplier import energon_multiplier

    with pytest.raises(OptionError, match="shuffle_over_epochs_multiplier=1 \\(the default\\)"):
        energon_multiplier(value)
    with pytest.raises(OptionError, match="an int, not a string: shuffle_over_epochs_multiplier=3"):
        energon_multiplier(" 3 ")


@pytest.mark.parametrize("part", ["²", "٣", "0²"])
def test_inspect_key_with_a_non_ascii_digit_is_refused_by_name(tmp_path, capsys, part):
    from datareel.cli import main

    state = datareel.Loader(list(range(8)), global_batch_size=4, micro_batch_size=4).state_dict()
    path = tmp_path / "s.json"
    path.write_text(__import__("json").dumps({"a": [state, state]}))
    assert main(["inspect", str(path), "--key", "a.0", "--json"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(path), "--key", f"a.{part}"]) == 1
    assert f"no {part!r} there" in capsys.readouterr().err
