-- 0001 audit schema: one row per job (schedule_audit), one per attempt
-- (schedule_attempts), every outbox event as received (schedule_events).
--
-- Partitioning key. All three tables are range-partitioned by month on the
-- JOB's creation time (schedule_audit.created_at, and job_created_at on the
-- other two), so `horae audit prune` drops a month of jobs together with all
-- of their attempts and events: nothing is left orphaned, and the relay can
-- always rebuild a job from its own events.
--
-- Uniqueness. A primary key of a partitioned table must contain the partition
-- key, so the keys below are (id, created_at), (job_id, attempt_no,
-- job_created_at) and (stream_ms, stream_seq, job_created_at). They are unique
-- on the job id / (job id, attempt) / stream id alone because every write
-- goes through schedule_job_index, an unpartitioned table with one row per
-- job id that fixes the job's created_at: the relay locks a job's index row,
-- then reads and writes the job's rows at exactly that created_at.
--
-- created_at is the `ts` of the job's latest `scheduled` event (in stream
-- order; sched_ms/sched_seq remember which one). Events delivered before
-- their `scheduled` (a relay died holding it) park the job at the first ts
-- seen; when `scheduled` lands the relay moves the job's rows (rare).
--
-- Partitions are created on demand: audit_ensure_partitions(month) for every
-- month a batch writes to, before the batch's transaction (the migrator also
-- creates the current and next month). There is deliberately no DEFAULT
-- partition: rows parked there would make creating that month's partition
-- fail later (or force moving them), while a missing partition is an error the
-- relay answers by creating it and retrying the batch.

CREATE TABLE schedule_job_index (
    job_id      text        PRIMARY KEY,
    created_at  timestamptz NOT NULL,
    sched_ms    bigint,
    sched_seq   bigint
);
CREATE INDEX schedule_job_index_created_at ON schedule_job_index (created_at);

CREATE TABLE schedule_audit (
    id               text        NOT NULL,
    topic            text        NOT NULL DEFAULT '',
    status           text        NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'completed', 'failed', 'cancelled')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer,
    backoff_type     text,
    backoff_delay_ms bigint,
    last_error       jsonb,
    run_at           timestamptz,
    tz               text,
    payload          jsonb,
    metadata         jsonb,
    trace_id         text,
    cron_name        text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    failed_at        timestamptz,
    cancelled_at     timestamptz,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
-- failures(): newest failed first, optionally per topic.
CREATE INDEX schedule_audit_failed ON schedule_audit (failed_at DESC) WHERE status = 'failed';
CREATE INDEX schedule_audit_topic_failed ON schedule_audit (topic, failed_at DESC) WHERE status = 'failed';
-- analytics export by day of last change.
CREATE INDEX schedule_audit_updated ON schedule_audit (updated_at);

CREATE TABLE schedule_attempts (
    job_id         text        NOT NULL,
    attempt_no     integer     NOT NULL,
    worker_id      text,
    started_at     timestamptz,
    finished_at    timestamptz,
    outcome        text
                   CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'worker_lost', 'no_listener')),
    error_type     text,
    error_message  text,
    duration_ms    bigint,
    lateness_ms    bigint,
    job_created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt_no, job_created_at)
) PARTITION BY RANGE (job_created_at);
-- analytics export by day of finish.
CREATE INDEX schedule_attempts_finished ON schedule_attempts (finished_at);

CREATE TABLE schedule_events (
    stream_ms      bigint      NOT NULL,
    stream_seq     bigint      NOT NULL,
    job_id         text        NOT NULL,
    event_type     text        NOT NULL,
    attempt_no     integer     NOT NULL,
    ts             timestamptz NOT NULL,
    fields         jsonb       NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    job_created_at timestamptz NOT NULL,
    PRIMARY KEY (stream_ms, stream_seq, job_created_at)
) PARTITION BY RANGE (job_created_at);
-- the relay re-reads a job's events to rebuild its rows.
CREATE INDEX schedule_events_job ON schedule_events (job_id);

-- Create the partitions of all three tables for the UTC month containing
-- `month`, if missing. Serialized by an advisory lock so concurrent relays
-- never race on CREATE TABLE.
CREATE FUNCTION audit_ensure_partitions(month date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lo     timestamp := date_trunc('month', month::timestamp);
    hi     timestamp := date_trunc('month', month::timestamp) + interval '1 month';
    suffix text      := to_char(date_trunc('month', month::timestamp), '"p"YYYYMM');
    parent text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('horae.audit.partitions'));
    FOREACH parent IN ARRAY ARRAY['schedule_audit', 'schedule_attempts', 'schedule_events'] LOOP
        IF to_regclass(quote_ident(parent || '_' || suffix)) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           parent || '_' || suffix, parent,
                           lo AT TIME ZONE 'UTC', hi AT TIME ZONE 'UTC');
        END IF;
    END LOOP;
END
$$;

-- Drop every monthly partition that ends at or before the UTC month of
-- `before`, and forget those jobs' index rows. Returns the dropped tables.
CREATE FUNCTION audit_drop_partitions(before timestamptz) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    cutoff timestamp := date_trunc('month', before AT TIME ZONE 'UTC');
    part   record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('horae.audit.partitions'));
    FOR part IN
        SELECT c.oid::regclass AS rel, c.relname AS name
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent IN ('schedule_audit'::regclass, 'schedule_attempts'::regclass,
                              'schedule_events'::regclass)
          AND c.relname ~ '_p[0-9]{6}$'
          AND to_date(right(c.relname, 6), 'YYYYMM') + interval '1 month' <= cutoff
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE %s', part.rel);
        RETURN NEXT part.name;
    END LOOP;
    DELETE FROM schedule_job_index WHERE created_at < cutoff AT TIME ZONE 'UTC';
END
$$;
