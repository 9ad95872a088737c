"""docs/datasets.md's environment for a local S3 server, exactly as written there: a process whose environment
holds only those ``AWS_*`` variables (the endpoint and two keys: no region, profile or ``~/.aws``) prepares a
dataset in a bucket, summarises it and reads it with a Loader, with and without workers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wds_helpers import build_shards

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"

CHILD = r"""
import json, os, sys
import datareel
from datareel.cli import main

assert main(["prepare", "s3://minimal/raw", "--quiet"]) == 0
assert main(["info", "s3://minimal/raw", "--json"]) == 0
out = {}
for workers in (0, 2):
    loader = datareel.Loader(datareel.open_dataset("s3://minimal/raw"), global_batch_size=4, micro_batch_size=2,
                             num_workers=workers)
    it = iter(loader)
    out[workers] = [list(next(it)["__key__"]) for _ in range(6)]
print("RESULT " + json.dumps(out))
"""


def documented_variables() -> list[str]:
    """The variables the local-server block of docs/datasets.md exports."""
    text = DOC.read_text()
    block = re.search(r"\*\*A local S3 server\*\*.*?```bash\n(.*?)```", text, flags=re.S)
    assert block is not None, "docs/datasets.md has no local S3 server block"
    return re.findall(r"^export (\w+)=", block.group(1), flags=re.M)


@pytest.mark.slow  # a subprocess, DataLoader workers
def test_a_local_s3_server_needs_only_the_endpoint_and_two_keys(tmp_path):
    from s3_server import make_bucket, s3_server, upload

    names = documented_variables()
    assert sorted(names) == ["AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY"]
    raw = tmp_path / "raw"
    keys = build_shards(raw, shard_sizes=(3, 4, 5), long_names=False)
    with s3_server() as endpoint:
        make_bucket("minimal")
        upload(raw, "s3://minimal/raw")
        values = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        home = tmp_path / "home"  # no ~/.aws, ~/.msc_config.yaml
        home.mkdir()
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(tmp_path), **{k: values[k] for k in names}}
        proc = subprocess.run(
            [sys.executable, "-c", CHILD], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
        )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    info = json.loads(proc.stdout[proc.stdout.index("{") : proc.stdout.index("RESULT")])
    assert info["splits"]["train"]["samples"] == 12, info
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result["0"] == result["2"]  # the same keys with workers (they read through obstore) as without
    assert {k for batch in result["0"] for k in batch} <= set(keys)
