"""The integration scenarios of test_scenarios.py with the namespace split into 6 partitions
over the cluster's 3 masters (the URL's `partitions=6`: every Scheduler and worker process
given it agrees). Scenarios that read the unpartitioned keys themselves are in
test_partitions.py."""

from __future__ import annotations

import pytest

from tests.cluster.servers import RedisCluster

# The very scenarios of test_scenarios.py, collected again here under this module's URL.
from tests.cluster.test_scenarios import *  # noqa: F401, F403
from tests.e2e.test_audit_soak import (  # noqa: F401
    test_postgres_agrees_with_redis_row_for_row,
)

PARTITIONS = 6


@pytest.fixture(scope="session")
def redis_url(redis_cluster: RedisCluster) -> str:
    return f"{redis_cluster.url}?partitions={PARTITIONS}"
