-- The nightly analytics' output tables, read by dashboards/horae-failure-analytics.json:
-- derived data that a report rebuilds. IF NOT EXISTS: the report's publish step
-- created them itself before they were a migration.
--
-- `day` is a day of the report zone (UTC by default); rates are in [0, 1],
-- NULL where the denominator is 0; durations and lateness in milliseconds.

CREATE TABLE IF NOT EXISTS schedule_failure_stats (
    topic                text             NOT NULL,
    day                  date             NOT NULL,
    jobs                 bigint           NOT NULL,  -- finished that day: completed + failed + cancelled
    completed            bigint           NOT NULL,
    failed               bigint           NOT NULL,
    cancelled            bigint           NOT NULL,
    failure_rate         double precision,           -- failed / (completed + failed)
    attempts             bigint           NOT NULL,  -- attempts that finished that day
    failed_attempts      bigint           NOT NULL,  -- outcome failed, timed_out or worker_lost
    attempt_failure_rate double precision,           -- failed_attempts / attempts
    retry_recovery_rate  double precision,           -- completed after a failed attempt / finished with one
    p50_duration_ms      double precision,
    p95_duration_ms      double precision,
    p99_duration_ms      double precision,
    p50_lateness_ms      double precision,
    p95_lateness_ms      double precision,
    p99_lateness_ms      double precision,
    timed_out            bigint           NOT NULL,
    worker_lost          bigint           NOT NULL,
    no_listener          bigint           NOT NULL,
    PRIMARY KEY (topic, day)
);

CREATE TABLE IF NOT EXISTS schedule_error_signatures (
    day            date   NOT NULL,
    topic          text   NOT NULL,
    signature      text   NOT NULL,  -- error type + message with ids, numbers, quoted values normalized
    count          bigint NOT NULL,  -- failed attempts with this signature that day
    example_job_id text   NOT NULL,  -- the job of the latest such attempt
    PRIMARY KEY (day, topic, signature)
);
