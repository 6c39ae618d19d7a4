"""Hypothesis profiles of the model-based and property tests (tests/model, tests/property).

"ci" (the default) is derandomized: every run tries the same examples, so a CI failure
replays locally and the run time is steady. HYPOTHESIS_PROFILE=long draws new examples
on every run and `budget()` multiplies each test's example count by LONG_FACTOR.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG_FACTOR = 10
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

# database=None: no .hypothesis/ directory in the checkout; a failure prints its reproduction.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile(
    "long",
    derandomize=False,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def budget(examples: int) -> int:
    """A test's example count: as given in CI, LONG_FACTOR times more under the long profile."""
    return examples * LONG_FACTOR if PROFILE == "long" else examples
