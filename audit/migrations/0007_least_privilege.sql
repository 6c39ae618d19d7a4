-- 0007: least privilege. The schema belongs to the role that runs the migrations (the
-- owner, `horae migrate`); workers, relays and readers may connect as roles that hold
-- only what they use, given by the owner with `horae audit grant ROLE` (README: Security):
--   read:  USAGE on the schema, SELECT on the audit and analytics tables, EXECUTE on
--          audit_ensure_partitions (opening the audit checks the current month's partitions);
--   relay: read, plus INSERT, UPDATE, DELETE on those tables (the relay writes the audit
--          rows, the nightly report replaces its tables' rows).
-- No such role may create, alter or drop anything: the relay's monthly partitions come from
-- audit_ensure_partitions, which now runs with its owner's rights (SECURITY DEFINER, with a
-- search_path fixed to the schema of the audit tables, so a caller cannot slip its own
-- objects in). Functions are executable by PUBLIC unless revoked: dropping partitions and
-- granting stay the owner's.
DO $$
DECLARE
    home text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'schedule_audit'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION audit_ensure_partitions(date) SECURITY DEFINER SET search_path = %I, pg_temp',
                   home);
END
$$;
REVOKE EXECUTE ON FUNCTION audit_ensure_partitions(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION audit_drop_partitions(timestamptz) FROM PUBLIC;

-- Grant `access` ('read' or 'relay') on this schema's audit objects to `grantee`; run by the
-- owner (it grants what it owns). Idempotent.
CREATE FUNCTION audit_grant(grantee text, access text) RETURNS void
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
    EXECUTE format('GRANT EXECUTE ON FUNCTION audit_ensure_partitions(date) TO %I', grantee);
    IF access = 'relay' THEN
        EXECUTE format('GRANT INSERT, UPDATE, DELETE ON %s TO %I',
                       replace(tables, 'schema_version, ', ''), grantee);
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION audit_grant(text, text) FROM PUBLIC;
