"""Hypothesis profiles: how many examples every property test runs is decided here, and only here.

A test never writes an absolute ``max_examples``; it asks for a share of the loaded profile's
count, ``@settings(max_examples=examples(0.4))``, so a costly test runs fewer examples than a
cheap one under every profile and one number scales them all:

=========  ===========  ========================================================================
profile    base count   use
=========  ===========  ========================================================================
``ci``     40           ``CI`` set (``.ci/run``): derandomized, the same examples every run, sized
                        so the README's test command fits 10 minutes on 2 cores
``explore`` 200         the local default: new random examples on every run, more of them
``fast``   10           derandomized, a few examples each: with ``-m "not slow and not workers"``
                        the quick tier (``HYPOTHESIS_PROFILE=fast``)
=========  ===========  ========================================================================

``HYPOTHESIS_PROFILE`` picks a profile (hypothesis' own ``--hypothesis-profile`` works too: it loads
before any test module is imported); ``DATAREEL_EXAMPLES=N`` replaces the loaded profile's base
count (e.g. ``DATAREEL_EXAMPLES=5000 pytest tests/sources/test_fuzz.py`` fuzzes longer).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

BASE = {"ci": 40, "explore": 200, "fast": 10}  # examples of a test at scale 1.0
SLOW_IS_FINE = [HealthCheck.too_slow]  # examples that build loaders are slow by nature; a hang guard bounds them

COMMON = dict(print_blob=True, deadline=None, suppress_health_check=SLOW_IS_FINE)
settings.register_profile("ci", max_examples=BASE["ci"], derandomize=True, **COMMON)
settings.register_profile("explore", max_examples=BASE["explore"], **COMMON)
settings.register_profile("fast", max_examples=BASE["fast"], derandomize=True, **COMMON)


def load() -> str:
    """Load the profile ``HYPOTHESIS_PROFILE`` names (default: ``ci`` where ``CI`` is set, else ``explore``)."""
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "explore")
    if name not in BASE:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r} is not one of the profiles {sorted(BASE)} (tests/profiles.py)")
    settings.load_profile(name)
    base = os.environ.get("DATAREEL_EXAMPLES")
    if base:
        if not base.isdigit() or int(base) < 1:
            raise ValueError(f"DATAREEL_EXAMPLES={base!r} must be a whole number >= 1 (the base example count)")
        settings.register_profile(f"{name}+examples", settings.get_profile(name), max_examples=int(base))
        settings.load_profile(f"{name}+examples")
    return name


def examples(scale: float = 1.0) -> int:
    """This test's example count: ``scale`` times the loaded profile's base count, at least 1.

    Read when the test module is imported, after conftest.py (or ``--hypothesis-profile``) loaded the
    profile.  ``scale`` says how costly one example is relative to a typical property test here
    (0.1: it builds loaders on several topologies; 3: it parses a few bytes)."""
    return max(1, round(settings.default.max_examples * scale))
