"""Where the test tree lies: the helper scripts tests run by path, the data, the repository's examples."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: conftest.py, the helper modules, data/, one folder per layer
HELPERS = TESTS  # the helper modules and scripts (fd_limit_reader.py, energon_script.py, length_fns.py) lie here
ROOT = TESTS.parent  # the repository: examples/, src/
DATA = TESTS / "data"
