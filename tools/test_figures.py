"""The test suite's figures in README.md and docs/testing.md, written from a run's junit report and checked.

    python tools/test_figures.py record report.xml [--machine "2 cores, fresh clone"]
    python tools/test_figures.py check report.xml

``record`` writes the count and the time of the run (tests, passed, skipped, xfailed, failed, wall time) between
the ``<!-- test-figures -->`` markers of both files.  ``check`` (run by ``.ci/run`` after the README's test
command) fails when the count written there is not the count of the run that just happened: a test added or
removed without recording the figures again.  Times depend on the machine and are only recorded, never checked.
The report is pytest's ``--junitxml`` (``.ci/run`` writes ``.ci-junit.xml``).
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", ROOT / "docs" / "testing.md")
MARK = re.compile(r"(<!-- test-figures -->)(.*?)(<!-- /test-figures -->)", re.S)
COUNT = re.compile(r"\*\*([0-9,]+) tests\*\*")


def figures(report: Path) -> dict[str, float]:
    """``tests``, ``passed``, ``skipped``, ``xfailed``, ``failed``, ``errors`` and ``seconds`` of a junit report."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = {"tests": 0, "skipped": 0, "failed": 0, "errors": 0, "xfailed": 0, "seconds": 0.0}
    for suite in suites:
        out["tests"] += int(suite.get("tests", 0))
        out["failed"] += int(suite.get("failures", 0))
        out["errors"] += int(suite.get("errors", 0))
        out["seconds"] += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            for skipped in case.findall("skipped"):
                if (skipped.get("type") or "").endswith("xfail"):
                    out["xfailed"] += 1
                else:
                    out["skipped"] += 1
    out["passed"] = out["tests"] - out["skipped"] - out["xfailed"] - out["failed"] - out["errors"]
    return out


def sentence(f: dict[str, float], machine: str) -> str:
    minutes, seconds = divmod(round(f["seconds"]), 60)
    parts = [f"{f['passed']:,} passed"]
    parts += [f"{f[k]:,} {k}" for k in ("skipped", "xfailed", "failed", "errors") if f[k]]
    return f"**{f['tests']:,} tests** ({', '.join(parts)}) in **{minutes} min {seconds:02d} s** ({machine})"


def record(report: Path, machine: str, files: tuple[Path, ...] = FILES) -> None:
    text = sentence(figures(report), machine)
    for path in files:
        body = path.read_text()
        if not MARK.search(body):
            sys.exit(f"{path}: no <!-- test-figures --> ... <!-- /test-figures --> markers to write between")
        path.write_text(MARK.sub(lambda m: f"{m.group(1)}{text}{m.group(3)}", body))
        print(f"{path.name}: {text}")


def check(report: Path, files: tuple[Path, ...] = FILES) -> int:
    ran = figures(report)["tests"]
    bad = []
    for path in files:
        found = MARK.search(path.read_text())
        count = COUNT.search(found.group(2)) if found else None
        written = int(count.group(1).replace(",", "")) if count else None
        if written != ran:
            bad.append(f"{path.name} says {written} tests")
    if bad:
        print(
            f"test figures: this run had {ran} tests, but " + "; ".join(bad) + ". Record this run's figures: "
            f"python tools/test_figures.py record {report}",
            file=sys.stderr,
        )
        return 1
    print(f"test figures: README.md and docs/testing.md say {ran} tests, as this run had")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("report", type=Path, help="pytest --junitxml report of the README's test command")
    parser.add_argument("--machine", default="2 cores, a fresh clone's .ci/run", help="where it ran (record)")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        parser.error(f"{args.report} does not exist: run the test command with --junitxml={args.report} first")
    if args.action == "record":
        record(args.report, args.machine)
        return 0
    return check(args.report)


if __name__ == "__main__":
    sys.exit(main())
