-- 0013: the analytics export finds the jobs that ended in a range by their terminal time
-- instead of by updated_at. The index on updated_at was written on every insert and every
-- update of a job row (a settlement changes updated_at, so no update of the row is ever HOT)
-- for one nightly query: bench/postgres_instructions.py counted it at 4.6 % of PostgreSQL's
-- instructions per audited job. The export (audit/analytics/sql/queries.sql: export_jobs) now
-- reads the partial indexes of the terminal states: completed (0009), failed (0001), and
-- cancelled below, which holds only cancelled jobs and so costs the other rows nothing.
CREATE INDEX schedule_audit_cancelled ON schedule_audit (cancelled_at)
    WHERE status = 'cancelled';
DROP INDEX schedule_audit_updated;
