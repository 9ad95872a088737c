"""Run Energon's own test suite against real megatron.energon and against ``datareel.energon``.

    python tools/energon_suite/run.py --tests /path/to/Megatron-Energon/tests [--python .venv/bin/python]
        [--side facade|energon|both] [--baseline earlier.json] [--timeout 1200] [-k EXPR] [--json out.json] [FILE ...]

For the facade side, every ``megatron.energon`` import is renamed to ``datareel.energon`` by the
plugin beside this file (``datareel_energon_shim.py``), which renames modules and nothing else.
Each test file runs in its own pytest process (bounded by ``--timeout``), from the folder that
holds ``tests/`` (Energon's tests import ``tests.epath_s3_emulator``).  It prints per-file and
total pass counts side by side, and with ``--json`` writes every test's outcome on each side.
Nothing of Energon's is copied: the tests are read from the checkout given.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("energon", "facade")


def outcomes(junit: Path) -> dict[str, str]:
    """``{test id: passed|failed|error|skipped}`` from one junit XML report."""
    result: dict[str, str] = {}
    if not junit.exists():
        return result
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            result[name] = "failed"
        elif "error" in kinds:
            result[name] = "error"
        elif "skipped" in kinds:
            result[name] = "skipped"
        else:
            result[name] = "passed"
    return result


def run_file(python: str, root: Path, test_file: str, side: str, timeout: float, keyword: str | None):
    """One pytest process over one file; returns (outcomes, note)."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "report.xml"
        cmd = [python, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", "--rootdir", str(root)]
        cmd += ["--junitxml", str(junit), "-o", "junit_family=xunit1"]
        if keyword:
            cmd += ["-k", keyword]
        env = dict(os.environ)
        paths = [str(root)]
        if side == "facade":
            cmd += ["-p", "datareel_energon_shim"]
            paths.insert(0, str(HERE))
        env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
            note = "" if proc.returncode in (0, 1) else f"pytest exit {proc.returncode}: {proc.stdout[-400:]}"
        except subprocess.TimeoutExpired:
            note = f"timed out after {timeout:.0f} s"
        return outcomes(junit), note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", required=True, type=Path, help="Energon's tests/ folder (a checkout)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with both libraries installed")
    parser.add_argument("--side", choices=("facade", "energon", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per test file and side")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--json", type=Path, help="write each test's outcome per side here")
    parser.add_argument(
        "--baseline", type=Path, help="a --json file of an earlier run: its energon column is shown, not rerun"
    )
    parser.add_argument("files", nargs="*", help="test files (names in tests/); all test_*.py by default")
    args = parser.parse_args(argv)
    tests = args.tests.resolve()
    if not (tests / "__init__.py").exists():
        parser.error(f"--tests {tests} has no __init__.py: pass the tests/ folder of an Energon checkout")
    root = tests.parent
    files = args.files or sorted(p.name for p in tests.glob("test_*.py"))
    sides = SIDES if args.side == "both" else (args.side,)
    table: dict[str, dict[str, dict[str, str]]] = {}
    if args.baseline and "energon" not in sides:
        earlier = json.loads(args.baseline.read_text())
        table = {name: {"energon": earlier.get(name, {}).get("energon", {})} for name in files}
        sides = SIDES
    notes: list[str] = []
    for name in files:
        table.setdefault(name, {})
        for side in sides:
            if side in table[name]:
                continue
            result, note = run_file(args.python, root, f"tests/{name}", side, args.timeout, args.keyword)
            table[name][side] = result
            if note:
                notes.append(f"{name} [{side}]: {note}")
            passed = sum(v == "passed" for v in result.values())
            print(f"  {name:34} {side:8} {passed:3} passed of {len(result):3}", file=sys.stderr, flush=True)
    print(f"{'file':34}" + "".join(f"{s + ' passed/total':>24}" for s in sides))
    totals = {s: [0, 0] for s in sides}
    for name, per_side in table.items():
        cells = []
        # A file that fails to import on one side reports one error, not its tests: count every test
        # either side collected, so the totals compare like with like.
        known = len({t for result in per_side.values() for t in result if "::" in t and not t.startswith("::")})
        for side in sides:
            result = per_side[side]
            passed = sum(v == "passed" for v in result.values())
            total = max(len(result), known)
            totals[side][0] += passed
            totals[side][1] += total
            cells.append(f"{passed:>17}/{total:<6}")
        print(f"{name:34}" + "".join(cells))
    print(f"{'total':34}" + "".join(f"{totals[s][0]:>17}/{totals[s][1]:<6}" for s in sides))
    for note in notes:
        print("note:", note)
    if args.json:
        args.json.write_text(json.dumps(table, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
