"""Test configuration: hypothesis profiles.

Locally, hypothesis explores new random examples on every run.  Under CI
(``CI`` set, as ``.ci/run`` runs) the ``ci`` profile derandomizes them: the same
examples every run, so a landing is judged on reproducible evidence; run the
suite locally (or with ``HYPOTHESIS_PROFILE=explore``) to keep searching.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "explore"))
