"""The suite writes nothing into the system temp dir, and fails when a test or the library leaves a temporary
file behind (issue 36): tests/conftest.py points ``tempfile`` and ``TMPDIR`` at a directory of the session
and checks it when the session ends. Run here on a probe test, in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from where import ROOT

PROBE = "DATAREEL_TEMP_PROBE"


@pytest.mark.skipif(PROBE not in os.environ, reason="run by the test below, in a pytest of its own")
def test_probe():
    where = tempfile.mkdtemp(prefix="probe-")  # the system temp dir's, as far as the code can tell
    assert os.environ["TMPDIR"] == tempfile.gettempdir() == os.path.dirname(where) != "/tmp"
    with open(os.path.join(os.environ["TMPDIR"], "probe-seen"), "a") as seen:  # for the test below to look at
        seen.write(where + "\n")
    if os.environ[PROBE] == "tidy":
        os.rmdir(where)
        os.remove(os.path.join(os.environ["TMPDIR"], "probe-seen"))


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["leaves", "tidy"])
def test_a_session_that_leaves_a_temporary_directory_fails_naming_it(tmp_path, probe):
    env = {**os.environ, PROBE: probe, "TMPDIR": str(tmp_path / "system")}  # stands in for the system's
    (tmp_path / "system").mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            __file__,
            "-k",
            "test_probe",
            "-q",
            "--basetemp",
            str(tmp_path / "base"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert list((tmp_path / "system").iterdir()) == []  # nothing in the system temp dir either way
    if probe == "leaves":
        assert run.returncode == 1, run.stdout + run.stderr
        assert "1 passed, 2 deselected, 1 error" in run.stdout
        assert "left 2 entries in its temporary directory" in run.stdout, run.stdout
        assert "probe-" in run.stdout and str(tmp_path / "base" / "system-tmp") in run.stdout, run.stdout
    else:
        assert run.returncode == 0, run.stdout + run.stderr
