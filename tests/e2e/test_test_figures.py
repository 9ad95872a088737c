"""tools/test_figures.py: the suite's figures in the docs come from a run's junit report, and CI fails when the
count written there is not the count of the run it just made."""

from __future__ import annotations

import importlib.util

import pytest

from where import ROOT

spec = importlib.util.spec_from_file_location("test_figures_tool", ROOT / "tools" / "test_figures.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="{tests}" time="601.4"><testcase classname="a" name="t1" time="1"/>
<testcase classname="a" name="t2"><skipped type="pytest.skip" message="no"/></testcase>
<testcase classname="a" name="t3"><skipped type="pytest.xfail" message="known"/></testcase>
<testcase classname="a" name="t4"><failure message="x"/></testcase></testsuite></testsuites>"""


def _files(tmp_path):
    files = []
    for name in ("README.md", "testing.md"):
        path = tmp_path / name
        path.write_text(f"before <!-- test-figures -->old<!-- /test-figures --> after in {name}\n")
        files.append(path)
    return tuple(files)


def test_record_writes_the_runs_figures_and_check_compares_the_count(tmp_path, capsys):
    files = _files(tmp_path)
    report = tmp_path / "junit.xml"
    report.write_text(REPORT.format(tests=4))
    assert tool.figures(report) == {
        "tests": 4, "passed": 1, "skipped": 1, "xfailed": 1, "failed": 1, "errors": 0, "seconds": 601.4,
    }  # fmt: skip
    tool.record(report, "2 cores", files)
    for path in files:
        text = path.read_text()
        assert "**4 tests** (1 passed, 1 skipped, 1 xfailed, 1 failed) in **10 min 01 s** (2 cores)" in text
        assert text.startswith("before <!-- test-figures -->") and text.rstrip().endswith(f"after in {path.name}")
    assert tool.check(report, files) == 0
    report.write_text(REPORT.format(tests=5))  # a test added since the figures were recorded
    assert tool.check(report, files) == 1
    assert "this run had 5 tests, but README.md says 4 tests" in capsys.readouterr().err


def test_the_repositorys_docs_carry_the_markers():
    for path in tool.FILES:
        found = tool.MARK.search(path.read_text())
        assert found and tool.COUNT.search(found.group(2)), f"{path} has no recorded test figures"


def test_a_missing_report_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(SystemExit):
        tool.main(["check", str(tmp_path / "none.xml")])
