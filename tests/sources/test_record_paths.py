"""What a record's ``dataset_path`` holds: the dataset's path string in the core, Energon's ``EPath`` once
``datareel.energon`` is loaded (it registers the type; the core imports nothing of it), made when the dataset is
opened, so samples read in a worker process (spawned, where nothing registered it) carry the same value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import datareel
from datareel.cli.prepare import prepare_webdataset
from wds_helpers import write_shard

PROBE = """
import sys
{imports}
import datareel
source = datareel.open_dataset(sys.argv[1])
path = source.read(0).__sources__[0].dataset_path
print(type(path).__module__, type(path).__name__, str(path) == sys.argv[1], "datareel.energon" in sys.modules)
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("records")
    write_shard(root / "part-0.tar", [(f"k{i:03d}", {"txt": f"text {i}".encode()}) for i in range(6)])
    prepare_webdataset(root, split_ratio="1,0,0", progress=False)
    return root


def _probe(root: Path, imports: str) -> list[str]:
    code = PROBE.format(imports=imports)
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_core_names_a_dataset_by_its_path_string_and_never_loads_the_facade(root):
    assert _probe(root, "") == ["builtins", "str", "True", "False"]


def test_with_the_facade_loaded_a_record_names_the_dataset_by_its_epath(root):
    assert _probe(root, "import datareel.energon") == ["datareel.energon.epathlib.path", "EPath", "True", "True"]


class PathTypes:
    """A batch as the type and value of each sample's record path."""

    def batch(self, samples):
        return [
            (type(s["__sources__"][0].dataset_path).__name__, str(s["__sources__"][0].dataset_path)) for s in samples
        ]


@pytest.mark.workers
def test_a_spawned_worker_reads_records_with_the_value_made_at_open(root):
    from datareel.energon.epathlib import EPath

    source = datareel.open_dataset(root)
    assert isinstance(source.read(0).__sources__[0].dataset_path, EPath)
    loader = datareel.Loader(
        source,
        global_batch_size=3,
        micro_batch_size=3,
        repeat=False,
        num_workers=1,
        multiprocessing_context="spawn",
        task_encoder=PathTypes(),
    )
    seen = {pair for batch in loader for pair in batch}
    loader.close()
    assert seen == {("EPath", str(root))}
