-- 0008: what operators did through the console or the HTTP API (console/, README: Console):
-- one row per action, written before the action's answer is sent, with who did it. A job
-- action (cancel, retry, reschedule, delete, replay) also carries the actor on the job's own
-- events; this table holds every action, those on schedules and topics too, and refusals.
CREATE TABLE schedule_operator_actions (
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text        NOT NULL,
    role    text        NOT NULL,
    action  text        NOT NULL,
    target  text        NOT NULL,
    outcome text        NOT NULL,  -- done, not_found, refused, error
    detail  jsonb
);
CREATE INDEX schedule_operator_actions_at ON schedule_operator_actions (at DESC);
CREATE INDEX schedule_operator_actions_target ON schedule_operator_actions (target, at DESC);

-- audit_grant (0007) now also lets both access levels append to (and read) the action log:
-- a console connecting as a read role records its operators' actions.
CREATE OR REPLACE FUNCTION audit_grant(grantee text, access text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    home   text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.oid = 'schedule_audit'::regclass);
    tables text := 'schema_version, schedule_job_index, schedule_audit, schedule_attempts, schedule_events, '
                   'schedule_failure_stats, schedule_error_signatures';
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
