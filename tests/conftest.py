"""Test configuration: hypothesis profiles.

Locally, hypothesis explores new random examples on every run.  Under CI
(``CI`` set, as ``.ci/run`` runs) the ``ci`` profile derandomizes them: the same
examples every run, so a landing is judged on reproducible evidence; run the
suite locally (or with ``HYPOTHESIS_PROFILE=explore``) to keep searching.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from datareel.cli.prepare import prepare_webdataset
from wds_helpers import write_shard

settings.register_profile("ci", derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "explore"))


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """A prepared Energon dataset of 3 shards × 30 TextSamples (keys ``t{shard}-{i:03d}``)."""
    root = tmp_path_factory.mktemp("texts")
    for s in range(3):
        write_shard(root / f"part-{s}.tar", [(f"t{s}-{i:03d}", {"txt": f"text {s} {i}".encode()}) for i in range(30)])
    prepare_webdataset(root, sample_type="TextSample", field_map={"text": "txt"}, progress=False)
    return root
