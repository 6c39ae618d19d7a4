-- Named queries of the audit trail, loaded by audit/sql.py. Each starts at a
-- `-- name: xxx` line and runs to the next one. Bound parameters only; the
-- batch statements take parallel arrays and unnest them (one round trip per
-- statement, whatever the batch size).

-- name: schema_version_exists
-- A role without CREATE on the schema may not even run CREATE TABLE IF NOT EXISTS.
SELECT to_regclass('schema_version') IS NOT NULL;

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS schema_version (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
SELECT version, name, checksum FROM schema_version ORDER BY version;

-- name: record_migration
INSERT INTO schema_version (version, name, checksum) VALUES ($1, $2, $3);

-- name: advisory_lock
SELECT pg_advisory_lock($1);

-- name: advisory_unlock
SELECT pg_advisory_unlock($1);

-- name: ensure_partitions
SELECT audit_ensure_partitions($1::date);

-- name: drop_partitions
SELECT name FROM audit_drop_partitions($1::timestamptz) AS name;

-- name: insert_job_index
-- New jobs only (returned: they have no stored events yet); sorted input so
-- concurrent relays take the keys in one order.
INSERT INTO schedule_job_index (job_id, created_at, sched_ms, sched_seq)
SELECT u.job_id, u.created_at, u.sched_ms, u.sched_seq
FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[])
     AS u(job_id, created_at, sched_ms, sched_seq)
ORDER BY u.job_id
ON CONFLICT (job_id) DO NOTHING
RETURNING job_id;

-- name: lock_job_index
-- Serializes relays that touch the same job: a job's rows are rebuilt under this
-- lock. Jobs whose index row this transaction inserted are not passed: they are
-- ours already (another relay's insert waits on the unique index).
SELECT job_id, created_at, sched_ms, sched_seq
FROM schedule_job_index
WHERE job_id = ANY($1::text[])
ORDER BY job_id
FOR UPDATE;

-- name: job_applied
-- The latest event folded into each job's row (migration 0002). A statement of its
-- own, after lock_job_index: in READ COMMITTED it reads what the previous holder
-- of a lock committed (a join in the locking statement would read its snapshot
-- from before the wait).
SELECT a.id AS job_id, a.applied_ms, a.applied_seq
FROM unnest($1::text[], $2::timestamptz[]) AS u(job_id, created_at)
JOIN schedule_audit AS a ON a.id = u.job_id AND a.created_at = u.created_at;

-- name: move_job_index
UPDATE schedule_job_index AS i
SET created_at = u.created_at, sched_ms = u.sched_ms, sched_seq = u.sched_seq
FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[])
     AS u(job_id, created_at, sched_ms, sched_seq)
WHERE i.job_id = u.job_id;

-- name: move_events
-- Cross-partition UPDATE: Postgres moves each row to its new partition.
UPDATE schedule_events AS e
SET job_created_at = u.new_created_at
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS u(job_id, old_created_at, new_created_at)
WHERE e.job_id = u.job_id AND e.job_created_at = u.old_created_at;

-- name: delete_moved_jobs
DELETE FROM schedule_audit AS a
USING unnest($1::text[], $2::timestamptz[]) AS u(job_id, old_created_at)
WHERE a.id = u.job_id AND a.created_at = u.old_created_at;

-- name: delete_moved_attempts
DELETE FROM schedule_attempts AS a
USING unnest($1::text[], $2::timestamptz[]) AS u(job_id, old_created_at)
WHERE a.job_id = u.job_id AND a.job_created_at = u.old_created_at;

-- name: insert_events
-- A batch with an event already stored (its relay died holding it): the writer COPYs a
-- batch first and comes here when that COPY meets a stored stream id.
-- $1: a JSON array of events, each [stream_ms, stream_seq, job_id, event_type,
-- attempt_no, ts_ms, fields, job_created_at] (fields: the event's own object). One
-- text parameter instead of eight arrays: asyncpg checks every array element in
-- Python, PostgreSQL parses the document in C, and positions instead of keys make
-- it smaller (about a fifth less server time per event than named objects). The
-- stream id is the idempotency key: a re-delivered event inserts nothing. Returns
-- the stream ids of the events that were new, as two arrays in one row (one row to
-- decode, not one per event).
WITH inserted AS (
    INSERT INTO schedule_events
        (stream_ms, stream_seq, job_id, event_type, attempt_no, ts, fields, job_created_at)
    SELECT (e->>0)::bigint, (e->>1)::bigint, e->>2, e->>3, (e->>4)::integer,
           'epoch'::timestamptz + (e->>5)::bigint * interval '1 millisecond', e->6, (e->>7)::timestamptz
    FROM jsonb_array_elements($1::jsonb) AS e
    ON CONFLICT (stream_ms, stream_seq, job_created_at) DO NOTHING
    RETURNING stream_ms, stream_seq
)
SELECT coalesce(array_agg(stream_ms), ARRAY[]::bigint[]) AS stream_ms,
       coalesce(array_agg(stream_seq), ARRAY[]::bigint[]) AS stream_seq
FROM inserted;

-- name: job_events
SELECT e.job_id, e.stream_ms, e.stream_seq, e.fields::text AS fields
FROM unnest($1::text[], $2::timestamptz[]) AS u(job_id, created_at)
JOIN schedule_events AS e ON e.job_id = u.job_id AND e.job_created_at = u.created_at;

-- name: upsert_jobs
-- $1: a JSON array of job rows, one object each with the columns as keys (one
-- text parameter, see insert_events).
INSERT INTO schedule_audit AS a
    (id, topic, status, attempts, max_attempts, backoff_type, backoff_delay_ms, last_error, run_at, tz,
     payload, metadata, trace_id, cron_name, created_at, updated_at, completed_at, failed_at, cancelled_at,
     applied_ms, applied_seq, deduplicated, parents)
SELECT u.id, u.topic, u.status, u.attempts, u.max_attempts, u.backoff_type, u.backoff_delay_ms,
       u.last_error::jsonb, u.run_at, u.tz, u.payload::jsonb, u.metadata::jsonb, u.trace_id, u.cron_name,
       u.created_at, u.updated_at, u.completed_at, u.failed_at, u.cancelled_at, u.applied_ms, u.applied_seq,
       u.deduplicated, u.parents
FROM json_to_recordset($1::json)
     AS u(id text, topic text, status text, attempts integer, max_attempts integer, backoff_type text,
          backoff_delay_ms bigint, last_error json, run_at timestamptz, tz text, payload json, metadata json,
          trace_id text, cron_name text, created_at timestamptz, updated_at timestamptz,
          completed_at timestamptz, failed_at timestamptz, cancelled_at timestamptz, applied_ms bigint,
          applied_seq bigint, deduplicated integer, parents text[])
ON CONFLICT (id, created_at) DO UPDATE SET
    topic = EXCLUDED.topic, status = EXCLUDED.status, attempts = EXCLUDED.attempts,
    max_attempts = EXCLUDED.max_attempts, backoff_type = EXCLUDED.backoff_type,
    backoff_delay_ms = EXCLUDED.backoff_delay_ms, last_error = EXCLUDED.last_error, run_at = EXCLUDED.run_at,
    tz = EXCLUDED.tz, payload = EXCLUDED.payload, metadata = EXCLUDED.metadata, trace_id = EXCLUDED.trace_id,
    cron_name = EXCLUDED.cron_name, updated_at = EXCLUDED.updated_at, completed_at = EXCLUDED.completed_at,
    failed_at = EXCLUDED.failed_at, cancelled_at = EXCLUDED.cancelled_at, applied_ms = EXCLUDED.applied_ms,
    applied_seq = EXCLUDED.applied_seq, deduplicated = EXCLUDED.deduplicated, parents = EXCLUDED.parents
WHERE (a.topic, a.status, a.attempts, a.max_attempts, a.backoff_type, a.backoff_delay_ms, a.last_error,
       a.run_at, a.tz, a.payload, a.metadata, a.trace_id, a.cron_name, a.updated_at, a.completed_at,
       a.failed_at, a.cancelled_at, a.applied_ms, a.applied_seq, a.deduplicated, a.parents)
      IS DISTINCT FROM
      (EXCLUDED.topic, EXCLUDED.status, EXCLUDED.attempts, EXCLUDED.max_attempts, EXCLUDED.backoff_type,
       EXCLUDED.backoff_delay_ms, EXCLUDED.last_error, EXCLUDED.run_at, EXCLUDED.tz, EXCLUDED.payload,
       EXCLUDED.metadata, EXCLUDED.trace_id, EXCLUDED.cron_name, EXCLUDED.updated_at, EXCLUDED.completed_at,
       EXCLUDED.failed_at, EXCLUDED.cancelled_at, EXCLUDED.applied_ms, EXCLUDED.applied_seq,
       EXCLUDED.deduplicated, EXCLUDED.parents);

-- name: settle_jobs
-- The columns an attempt, a settlement or a cancellation changes, for job rows whose other
-- columns are stored as they stand (audit/relay/writer.py: JobFold.written): typed arrays,
-- no JSON document of the whole row to parse or compare. last_error is JSON text.
-- Parameters: id, created_at, then audit/relay/fold.py SETTLED_COLUMNS in their order.
UPDATE schedule_audit AS a SET
    status = u.status, attempts = u.attempts, last_error = u.last_error::jsonb,
    updated_at = u.updated_at, completed_at = u.completed_at, failed_at = u.failed_at,
    cancelled_at = u.cancelled_at, applied_ms = u.applied_ms, applied_seq = u.applied_seq,
    deduplicated = u.deduplicated
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::integer[], $5::text[],
            $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::timestamptz[],
            $10::bigint[], $11::bigint[], $12::integer[])
     AS u(id, created_at, status, attempts, last_error, updated_at, completed_at, failed_at,
          cancelled_at, applied_ms, applied_seq, deduplicated)
WHERE a.id = u.id AND a.created_at = u.created_at;

-- name: delete_stale_attempts
-- Attempt rows the rebuilt job no longer has (an attempt given back by attempt_released).
DELETE FROM schedule_attempts AS a
USING unnest($1::text[], $2::timestamptz[]) AS u(job_id, created_at)
WHERE a.job_id = u.job_id AND a.job_created_at = u.created_at
  AND NOT EXISTS (
      SELECT 1 FROM unnest($3::text[], $4::integer[]) AS k(job_id, attempt_no)
      WHERE k.job_id = a.job_id AND k.attempt_no = a.attempt_no);

-- name: upsert_attempts
-- $1: a JSON array of attempt rows, one object each (keys as the record below; one
-- text parameter, see insert_events).
INSERT INTO schedule_attempts AS a
    (job_id, attempt_no, worker_id, started_at, finished_at, outcome, error_type, error_message,
     duration_ms, lateness_ms, job_created_at, progress_percent, progress_message, logs, result)
SELECT u.job_id, u.attempt, u.worker, u.started_at, u.finished_at, u.outcome, u.error_type, u.error_message,
       u.duration_ms, u.lateness_ms, u.job_created_at, u.progress_percent, u.progress_message, u.logs,
       u.result
FROM json_to_recordset($1::json)
     AS u(job_id text, attempt integer, worker text, started_at timestamptz, finished_at timestamptz,
          outcome text, error_type text, error_message text, duration_ms bigint, lateness_ms bigint,
          job_created_at timestamptz, progress_percent double precision, progress_message text, logs jsonb,
          result jsonb)
ON CONFLICT (job_id, attempt_no, job_created_at) DO UPDATE SET
    worker_id = EXCLUDED.worker_id, started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
    outcome = EXCLUDED.outcome, error_type = EXCLUDED.error_type, error_message = EXCLUDED.error_message,
    duration_ms = EXCLUDED.duration_ms, lateness_ms = EXCLUDED.lateness_ms,
    progress_percent = EXCLUDED.progress_percent, progress_message = EXCLUDED.progress_message,
    logs = EXCLUDED.logs, result = EXCLUDED.result
WHERE (a.worker_id, a.started_at, a.finished_at, a.outcome, a.error_type, a.error_message, a.duration_ms,
       a.lateness_ms, a.progress_percent, a.progress_message, a.logs, a.result)
      IS DISTINCT FROM
      (EXCLUDED.worker_id, EXCLUDED.started_at, EXCLUDED.finished_at, EXCLUDED.outcome, EXCLUDED.error_type,
       EXCLUDED.error_message, EXCLUDED.duration_ms, EXCLUDED.lateness_ms, EXCLUDED.progress_percent,
       EXCLUDED.progress_message, EXCLUDED.logs, EXCLUDED.result);

-- name: get_job
SELECT a.*
FROM schedule_job_index AS i
JOIN schedule_audit AS a ON a.id = i.job_id AND a.created_at = i.created_at
WHERE i.job_id = $1;

-- name: get_attempts
SELECT t.*
FROM schedule_job_index AS i
JOIN schedule_attempts AS t ON t.job_id = i.job_id AND t.job_created_at = i.created_at
WHERE i.job_id = $1
ORDER BY t.attempt_no;

-- name: get_events
SELECT e.stream_ms, e.stream_seq, e.event_type, e.attempt_no, e.ts, e.received_at, e.fields::text AS fields
FROM schedule_job_index AS i
JOIN schedule_events AS e ON e.job_id = i.job_id AND e.job_created_at = i.created_at
WHERE i.job_id = $1
ORDER BY e.stream_ms, e.stream_seq;

-- name: failures
SELECT a.*
FROM schedule_audit AS a
WHERE a.status = 'failed'
  AND ($1::text IS NULL OR a.topic = $1)
  AND ($2::timestamptz IS NULL OR a.failed_at >= $2)
ORDER BY a.failed_at DESC, a.id
LIMIT $3;

-- name: partition_months
-- Months (YYYYMM) whose partitions exist for all three audit tables.
SELECT right(c.relname, 6) AS yyyymm
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent IN ('schedule_audit'::regclass, 'schedule_attempts'::regclass, 'schedule_events'::regclass)
  AND c.relname ~ '_p[0-9]{6}$'
GROUP BY right(c.relname, 6)
HAVING count(*) = 3;

-- name: grant_access
-- Migration 0007's audit_grant: $1 the role, $2 'read' or 'relay'.
SELECT audit_grant($1, $2);

-- name: record_action
-- Console/API operator actions (migration 0008): $1 actor, $2 role, $3 action, $4 target,
-- $5 outcome, $6 detail (json text or NULL). A text parameter cast here: as a jsonb
-- parameter the reader's jsonb codec would encode the text again (a JSON string).
INSERT INTO schedule_operator_actions (actor, role, action, target, outcome, detail)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb);

-- name: recent_actions
-- The latest actions (index schedule_operator_actions_at). One target's are
-- recent_actions_of: a `$1 IS NULL OR target = $1` filter cannot use the target
-- index in a generic plan, which then walks every action newest first.
SELECT at, actor, role, action, target, outcome, detail::text AS detail
FROM schedule_operator_actions
ORDER BY at DESC
LIMIT $1;

-- name: recent_actions_of
-- The latest actions on one target: a job id, schedule or topic (index
-- schedule_operator_actions_target).
SELECT at, actor, role, action, target, outcome, detail::text AS detail
FROM schedule_operator_actions
WHERE target = $1
ORDER BY at DESC
LIMIT $2;

-- name: finished_last_hour
-- Per topic: jobs that completed and jobs that failed for good since $1, from the jobs'
-- rows alone (index schedule_audit_completed, migration 0009, and schedule_audit_failed:
-- partial indexes by end time). A completion counts once per job, whichever attempt
-- (or no listener) completed it; a job cancelled during its last attempt does not count.
SELECT topic, sum(completed)::bigint AS completed, sum(failed)::bigint AS failed
FROM (
    SELECT topic, 1 AS completed, 0 AS failed
    FROM schedule_audit
    WHERE status = 'completed' AND completed_at >= $1
    UNION ALL
    SELECT topic, 0, 1
    FROM schedule_audit
    WHERE status = 'failed' AND failed_at >= $1
) AS ended
GROUP BY topic;

-- name: failure_baseline
-- Per topic: the mean daily failure rate over [$1, $2) from the nightly report's table.
SELECT topic, avg(failure_rate) AS rate, count(*) AS days
FROM schedule_failure_stats
WHERE day >= $1 AND day < $2 AND failure_rate IS NOT NULL
GROUP BY topic;

-- name: job_statuses
SELECT i.job_id, a.status
FROM schedule_job_index AS i
JOIN schedule_audit AS a ON a.id = i.job_id AND a.created_at = i.created_at
WHERE i.job_id = ANY($1::text[]);

-- name: jobs_by_id_prefix
-- The jobs whose id starts with $1, by id, after $3 (the previous page's last id), $4 of them:
-- a range of the index's primary key ($2: the first text past every id with the prefix, in code
-- point order), the prefix itself checked again so a collation other than C never adds a job.
SELECT a.*
FROM schedule_job_index AS i
JOIN schedule_audit AS a ON a.id = i.job_id AND a.created_at = i.created_at
WHERE i.job_id >= $1 AND i.job_id < $2 AND i.job_id > $3 AND left(i.job_id, length($1)) = $1
ORDER BY i.job_id
LIMIT $4;

-- name: rollups_writable
-- Whether the current role may write both rollup tables (migration 0010; a relay role granted
-- before it may not). has_table_privilege with several privileges says whether ANY is held:
-- each is asked alone.
SELECT count(*) = 2 AND coalesce(bool_and(has_table_privilege(c.oid, 'INSERT')
                                          AND has_table_privilege(c.oid, 'UPDATE')
                                          AND has_table_privilege(c.oid, 'DELETE')), false)
FROM pg_class AS c
WHERE c.oid IN (to_regclass('schedule_minute_rollups'), to_regclass('schedule_hour_rollups'));

-- name: upsert_rollups
-- What a batch's new events add to each topic's minute and hour (migration 0010), in the
-- batch's transaction. $1: a JSON array of rows {topic, minute, hour, completed, failed,
-- failed_attempts, retried, deduplicated, lateness}, sorted by (topic, minute) so concurrent
-- relays lock the rows in one order.
WITH d AS (
    SELECT *
    FROM json_to_recordset($1::json) AS u(
        topic text, minute timestamptz, hour timestamptz, completed bigint, failed bigint,
        failed_attempts bigint, retried bigint, deduplicated bigint, lateness bigint[])
), m AS (
    INSERT INTO schedule_minute_rollups AS r
        (topic, minute, completed, failed, failed_attempts, retried, deduplicated, lateness)
    SELECT topic, minute, completed, failed, failed_attempts, retried, deduplicated, lateness
    FROM d
    ORDER BY topic, minute
    ON CONFLICT (topic, minute) DO UPDATE SET
        completed = r.completed + EXCLUDED.completed,
        failed = r.failed + EXCLUDED.failed,
        failed_attempts = r.failed_attempts + EXCLUDED.failed_attempts,
        retried = r.retried + EXCLUDED.retried,
        deduplicated = r.deduplicated + EXCLUDED.deduplicated,
        lateness = audit_add_buckets(r.lateness, EXCLUDED.lateness)
)
INSERT INTO schedule_hour_rollups AS r
    (topic, hour, completed, failed, failed_attempts, retried, deduplicated, lateness)
SELECT topic, hour, sum(completed), sum(failed), sum(failed_attempts), sum(retried),
       sum(deduplicated), audit_sum_buckets(lateness)
FROM d
GROUP BY topic, hour
ORDER BY topic, hour
ON CONFLICT (topic, hour) DO UPDATE SET
    completed = r.completed + EXCLUDED.completed,
    failed = r.failed + EXCLUDED.failed,
    failed_attempts = r.failed_attempts + EXCLUDED.failed_attempts,
    retried = r.retried + EXCLUDED.retried,
    deduplicated = r.deduplicated + EXCLUDED.deduplicated,
    lateness = audit_add_buckets(r.lateness, EXCLUDED.lateness);

-- name: record_depth
-- A relay's queue-depth sample (at most one a minute): $1 a JSON array of rows {topic, minute,
-- hour, waiting, retrying}, sorted by topic. The minute keeps the latest sample, the hour its
-- largest.
WITH d AS (
    SELECT *
    FROM json_to_recordset($1::json) AS u(
        topic text, minute timestamptz, hour timestamptz, waiting bigint, retrying bigint)
), m AS (
    INSERT INTO schedule_minute_rollups AS r (topic, minute, waiting, retrying)
    SELECT topic, minute, waiting, retrying FROM d ORDER BY topic, minute
    ON CONFLICT (topic, minute) DO UPDATE SET
        waiting = EXCLUDED.waiting, retrying = EXCLUDED.retrying
)
INSERT INTO schedule_hour_rollups AS r (topic, hour, waiting, retrying)
SELECT topic, hour, waiting, retrying FROM d ORDER BY topic, hour
ON CONFLICT (topic, hour) DO UPDATE SET
    waiting = greatest(r.waiting, EXCLUDED.waiting),
    retrying = greatest(r.retrying, EXCLUDED.retrying);

-- name: prune_minute_rollups
-- Minute rows older than $1 (the hour rows keep their counts).
DELETE FROM schedule_minute_rollups WHERE minute < $1;

-- name: minute_rollups
-- Every topic's minute rows since $1 (index on minute), by topic and time.
SELECT topic, minute AS at, completed, failed, failed_attempts, retried, deduplicated,
       lateness, waiting, retrying
FROM schedule_minute_rollups
WHERE minute >= $1
ORDER BY topic, minute;

-- name: topic_minute_rollups
-- Topic $2's minute rows since $1 (the primary key), by time.
SELECT topic, minute AS at, completed, failed, failed_attempts, retried, deduplicated,
       lateness, waiting, retrying
FROM schedule_minute_rollups
WHERE topic = $2 AND minute >= $1
ORDER BY minute;

-- name: hour_rollups
-- Every topic's hour rows since $1 (index on hour), by topic and time.
SELECT topic, hour AS at, completed, failed, failed_attempts, retried, deduplicated,
       lateness, waiting, retrying
FROM schedule_hour_rollups
WHERE hour >= $1
ORDER BY topic, hour;

-- name: topic_hour_rollups
-- Topic $2's hour rows since $1 (the primary key), by time.
SELECT topic, hour AS at, completed, failed, failed_attempts, retried, deduplicated,
       lateness, waiting, retrying
FROM schedule_hour_rollups
WHERE topic = $2 AND hour >= $1
ORDER BY hour;

-- name: recent_failure_errors
-- The last errors of topic $1's jobs that failed for good since $2, newest first, $3 at most
-- (index schedule_audit_topic_failed): the topic page groups them by signature.
SELECT id, last_error::text AS last_error
FROM schedule_audit
WHERE topic = $1 AND status = 'failed' AND failed_at >= $2
ORDER BY failed_at DESC
LIMIT $3;
