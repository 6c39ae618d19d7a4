"""The integration scenarios of test_scenarios.py with the namespace split into 6 partitions
over the cluster's 3 masters (the URL's `partitions=6`: every Scheduler and worker process
given it agrees). Scenarios that read the unpartitioned keys themselves are in test_partitions.py."""

from __future__ import annotations

import pytest

from tests.cluster.servers import RedisCluster
from tests.integration.test_engine import (  # noqa: F401
    test_default_exponential_retries_then_terminal_failure,
    test_fixed_backoff_then_success_and_event_attempt_increments,
    test_job_runs_at_its_due_time_and_not_before,
)
from tests.integration.test_engine_control import (  # noqa: F401
    test_cancel_during_running_attempt_lets_it_finish_but_ends_cancelled,
    test_cancel_waiting_and_retrying_jobs_stops_future_attempts,
    test_idle_worker_wakes_for_an_earlier_job_without_polling,
    test_job_id_is_an_idempotency_key_and_stats_count_per_topic,
)
from tests.integration.test_cron_engine import (  # noqa: F401
    test_ticks_become_ordinary_jobs_exactly_once,
)
from tests.integration.test_multiprocess import (  # noqa: F401
    test_three_processes_run_each_of_2000_jobs_exactly_once,
)
from tests.integration.test_crash import (  # noqa: F401
    test_sigkill_mid_attempt_is_recovered_as_worker_lost_and_retried,
)
from tests.integration.test_cron_multiprocess import (  # noqa: F401
    test_each_tick_runs_exactly_once_across_three_processes,
)
from tests.e2e.test_audit_flow import (  # noqa: F401
    test_every_path_leaves_the_exact_audit_rows,
)
from tests.e2e.test_audit_soak import (  # noqa: F401
    test_postgres_agrees_with_redis_row_for_row,
)

PARTITIONS = 6


@pytest.fixture(scope="session")
def redis_url(redis_cluster: RedisCluster) -> str:
    return f"{redis_cluster.url}?partitions={PARTITIONS}"
