-- Named queries of the analytics pipeline (split at `-- name:` like audit/queries.sql).
-- Export queries take $1 = start, $2 = end (timestamptz, half-open) and return the
-- columns of schema.py in its order, timestamps as epoch microseconds (nothing depends
-- on the session's time zone), then `day`: the UTC day of finished_at as days since
-- 1970-01-01, in finished_at order. export.py runs them in COPY, jdbc.py hands them to Spark.

-- name: export_lock
SELECT pg_advisory_lock(hashtext('horae.analytics.export'));

-- name: export_unlock
SELECT pg_advisory_unlock(hashtext('horae.analytics.export'));

-- name: export_jobs
-- Jobs that reached their terminal state in [$1, $2), with that instant and
-- the number of failed attempts they had. Each terminal state's branch is one range
-- of that state's partial index (0009, 0001, 0013); created_at < $2 prunes later
-- partitions.
SELECT j.id AS job_id, j.topic, j.status, j.attempts, j.max_attempts,
       coalesce(f.failed_attempts, 0)::integer AS failed_attempts,
       (extract(epoch FROM j.created_at) * 1000000)::bigint AS created_at,
       (extract(epoch FROM j.run_at) * 1000000)::bigint AS run_at,
       (extract(epoch FROM t.finished_at) * 1000000)::bigint AS finished_at,
       j.last_error ->> 'type' AS last_error_type,
       j.last_error ->> 'message' AS last_error_message,
       j.cron_name,
       ((t.finished_at AT TIME ZONE 'UTC')::date - DATE '1970-01-01') AS day
FROM schedule_audit j
CROSS JOIN LATERAL (
    SELECT CASE j.status WHEN 'completed' THEN j.completed_at
                         WHEN 'failed' THEN j.failed_at
                         WHEN 'cancelled' THEN j.cancelled_at END AS finished_at
) t
LEFT JOIN LATERAL (
    SELECT count(*) AS failed_attempts
    FROM schedule_attempts a
    WHERE a.job_id = j.id AND a.job_created_at = j.created_at
      AND a.outcome IN ('failed', 'timed_out', 'worker_lost')
) f ON true
WHERE j.created_at < $2
  AND ((j.status = 'completed' AND j.completed_at >= $1 AND j.completed_at < $2)
    OR (j.status = 'failed' AND j.failed_at >= $1 AND j.failed_at < $2)
    OR (j.status = 'cancelled' AND j.cancelled_at >= $1 AND j.cancelled_at < $2))
ORDER BY t.finished_at

-- name: export_attempts
-- Attempts that finished in [$1, $2), with their job's topic.
SELECT a.job_id, a.attempt_no, j.topic, a.worker_id,
       (extract(epoch FROM a.started_at) * 1000000)::bigint AS started_at,
       (extract(epoch FROM a.finished_at) * 1000000)::bigint AS finished_at,
       a.outcome, a.error_type, a.error_message, a.duration_ms, a.lateness_ms,
       (extract(epoch FROM a.job_created_at) * 1000000)::bigint AS job_created_at,
       ((a.finished_at AT TIME ZONE 'UTC')::date - DATE '1970-01-01') AS day
FROM schedule_attempts a
JOIN schedule_audit j ON j.id = a.job_id AND j.created_at = a.job_created_at
WHERE a.finished_at >= $1 AND a.finished_at < $2 AND a.job_created_at < $2
  AND a.outcome IS NOT NULL
ORDER BY a.finished_at

-- name: publish_lock
SELECT pg_advisory_xact_lock(hashtext('horae.analytics.publish'));

-- name: delete_failure_stats
DELETE FROM schedule_failure_stats WHERE day >= $1 AND day <= $2;

-- name: delete_error_signatures
DELETE FROM schedule_error_signatures WHERE day >= $1 AND day <= $2;

-- name: upsert_failure_stats
INSERT INTO schedule_failure_stats (
    topic, day, jobs, completed, failed, cancelled, failure_rate, attempts, failed_attempts,
    attempt_failure_rate, retry_recovery_rate, p50_duration_ms, p95_duration_ms, p99_duration_ms,
    p50_lateness_ms, p95_lateness_ms, p99_lateness_ms, timed_out, worker_lost, no_listener)
SELECT * FROM unnest(
    $1::text[], $2::date[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::float8[],
    $8::bigint[], $9::bigint[], $10::float8[], $11::float8[], $12::float8[], $13::float8[], $14::float8[],
    $15::float8[], $16::float8[], $17::float8[], $18::bigint[], $19::bigint[], $20::bigint[])
ON CONFLICT (topic, day) DO UPDATE SET
    jobs = EXCLUDED.jobs, completed = EXCLUDED.completed, failed = EXCLUDED.failed,
    cancelled = EXCLUDED.cancelled, failure_rate = EXCLUDED.failure_rate, attempts = EXCLUDED.attempts,
    failed_attempts = EXCLUDED.failed_attempts, attempt_failure_rate = EXCLUDED.attempt_failure_rate,
    retry_recovery_rate = EXCLUDED.retry_recovery_rate, p50_duration_ms = EXCLUDED.p50_duration_ms,
    p95_duration_ms = EXCLUDED.p95_duration_ms, p99_duration_ms = EXCLUDED.p99_duration_ms,
    p50_lateness_ms = EXCLUDED.p50_lateness_ms, p95_lateness_ms = EXCLUDED.p95_lateness_ms,
    p99_lateness_ms = EXCLUDED.p99_lateness_ms, timed_out = EXCLUDED.timed_out,
    worker_lost = EXCLUDED.worker_lost, no_listener = EXCLUDED.no_listener;

-- name: upsert_error_signatures
INSERT INTO schedule_error_signatures (day, topic, signature, count, example_job_id)
SELECT * FROM unnest($1::date[], $2::text[], $3::text[], $4::bigint[], $5::text[])
ON CONFLICT (day, topic, signature) DO UPDATE SET
    count = EXCLUDED.count, example_job_id = EXCLUDED.example_job_id;
