-- 0010: per-minute and per-hour rollups for the console's charts (README: Console), kept by the
-- audit relay inside each batch's own transaction (audit/relay/rollup.py): no trigger, so the
-- per-job cost in PostgreSQL stays what it was. Counts are of events new to the audit (the
-- stream id is the idempotency key), so a batch delivered twice adds nothing twice.
--
--   completed        jobs completed, at their completion time (schedule_audit.completed_at)
--   failed           jobs failed for good, at their failure time (schedule_audit.failed_at)
--   failed_attempts  attempts that ended failed, timed out or lost (at the attempt's end)
--   retried          retries scheduled after a failed attempt (at the settlement)
--   deduplicated     later calls a dedupe key, debounce or the topic's policy kept out
--   lateness         attempt starts per lateness bucket (start - due, ms): bucket 0 holds
--                    lateness < 1 ms, bucket i >= 1 holds [2^(i-1), 2^i) ms, the last one all
--                    the rest; summed element-wise (audit_add_buckets, audit_sum_buckets)
--   waiting,         the queue depth sampled by a relay at most once a minute: jobs scheduled
--   retrying         and retrying in Redis (NULL: no sample); an hour's row keeps its maximum
--
-- The overview's 24 hours read at most 24 rows per topic (schedule_hour_rollups); the last hour
-- 60 (schedule_minute_rollups). Minute rows older than two days are deleted by the relay.
CREATE FUNCTION audit_add_buckets(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), ARRAY[]::bigint[])
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

CREATE AGGREGATE audit_sum_buckets(bigint[]) (
    SFUNC = audit_add_buckets,
    STYPE = bigint[],
    INITCOND = '{}'
);

CREATE TABLE schedule_minute_rollups (
    topic           text        NOT NULL,
    minute          timestamptz NOT NULL,
    completed       bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    failed_attempts bigint      NOT NULL DEFAULT 0,
    retried         bigint      NOT NULL DEFAULT 0,
    deduplicated    bigint      NOT NULL DEFAULT 0,
    lateness        bigint[]    NOT NULL DEFAULT '{}',
    waiting         bigint,
    retrying        bigint,
    PRIMARY KEY (topic, minute)
);
-- The overview reads every topic's last hour; the relay prunes by age.
CREATE INDEX schedule_minute_rollups_minute ON schedule_minute_rollups (minute);

CREATE TABLE schedule_hour_rollups (
    topic           text        NOT NULL,
    hour            timestamptz NOT NULL,
    completed       bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    failed_attempts bigint      NOT NULL DEFAULT 0,
    retried         bigint      NOT NULL DEFAULT 0,
    deduplicated    bigint      NOT NULL DEFAULT 0,
    lateness        bigint[]    NOT NULL DEFAULT '{}',
    waiting         bigint,
    retrying        bigint,
    PRIMARY KEY (topic, hour)
);
CREATE INDEX schedule_hour_rollups_hour ON schedule_hour_rollups (hour);

-- audit_grant (0008) now also covers the rollups: read roles read them, the relay writes them.
CREATE OR REPLACE FUNCTION audit_grant(grantee text, access text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    home   text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.oid = 'schedule_audit'::regclass);
    tables text := 'schema_version, schedule_job_index, schedule_audit, schedule_attempts, schedule_events, '
                   'schedule_failure_stats, schedule_error_signatures, schedule_minute_rollups, '
                   'schedule_hour_rollups';
BEGIN
    IF access IS NULL OR access NOT IN ('read', 'relay') THEN
        RAISE EXCEPTION 'access must be read or relay, got %', access USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', home, grantee);
    EXECUTE format('GRANT SELECT ON %s TO %I', tables, grantee);
    EXECUTE format('GRANT SELECT, INSERT ON schedule_operator_actions TO %I', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION audit_ensure_partitions(date) TO %I', grantee);
    IF access = 'relay' THEN
        EXECUTE format('GRANT INSERT, UPDATE, DELETE ON %s TO %I',
                       replace(tables, 'schema_version, ', ''), grantee);
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION audit_grant(text, text) FROM PUBLIC;
