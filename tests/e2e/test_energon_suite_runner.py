"""tools/energon_suite: its shim resolves every ``megatron.energon`` import to ``datareel.energon`` (renaming
modules only), and the runner counts each file's outcomes on both sides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tools" / "energon_suite" / "run.py"
pytestmark = pytest.mark.slow

SUITE = """
import megatron.energon
from megatron.energon import TextSample
from megatron.energon.task_encoder.base import stateless


def test_the_package_is_datareels():
    assert megatron.energon.__name__ == "datareel.energon"
    assert TextSample.__module__ == "datareel.sources.typed"
    assert stateless.__module__.startswith("datareel.energon")


def test_a_missing_module_is_missing():
    import importlib

    import pytest

    with pytest.raises(ModuleNotFoundError, match="megatron.energon.no_such_module"):
        importlib.import_module("megatron.energon.no_such_module")


def test_fails_on_purpose():
    assert False
"""


def test_the_runner_counts_the_facade_side_of_a_suite(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "test_names.py").write_text(SUITE)
    out = tmp_path / "outcomes.json"
    cmd = [sys.executable, str(RUNNER), "--tests", str(tests), "--side", "facade", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = json.loads(out.read_text())["test_names.py"]["facade"]
    assert sorted(outcomes.values()) == ["failed", "passed", "passed"], outcomes
    assert outcomes["tests.test_names::test_fails_on_purpose"] == "failed"
    assert "total" in proc.stdout and "2/3" in proc.stdout.replace(" ", "")
