"""The integration scenarios that matter, run unchanged on a real Redis Cluster (3 masters,
3 replicas): this module's fixtures (conftest.py) hand them the cluster's URL and a cluster
client, so every Scheduler in them connects with redis+cluster:// and the routed wire. (The
5,000-job audit soak runs with 6 partitions, test_scenarios_partitioned.py: the budget of
`make test` allows it once.)"""

from __future__ import annotations

from tests.e2e.test_audit_flow import (  # noqa: F401
    test_every_path_leaves_the_exact_audit_rows,
)
from tests.integration.test_crash import (  # noqa: F401
    test_sigkill_mid_attempt_is_recovered_as_worker_lost_and_retried,
)
from tests.integration.test_cron_engine import (  # noqa: F401
    test_ticks_become_ordinary_jobs_exactly_once,
)
from tests.integration.test_cron_multiprocess import (  # noqa: F401
    test_each_tick_runs_exactly_once_across_three_processes,
)
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
from tests.integration.test_multiprocess import (  # noqa: F401
    test_three_processes_run_each_of_2000_jobs_exactly_once,
)
