-- 0012: a job's parents (scheduled with after=: the ids of the jobs it waited for, carried
-- by its `scheduled` event as field parents, a JSON list), kept on its row so lineage is
-- queryable after Redis has forgotten the jobs (`WHERE $1 = ANY(parents)` finds a job's
-- children). NULL: the job had no parents. A child failed by its parent (on_parent_failure
-- "fail") makes no attempt, so no attempt row carries its outcome; the outcome check is
-- widened anyway, so an attempt-less outcome written later needs no migration of its own.
-- On the partitioned tables the column and the constraint reach every partition.
ALTER TABLE schedule_audit
    ADD COLUMN parents text[];
ALTER TABLE schedule_attempts
    DROP CONSTRAINT schedule_attempts_outcome_check,
    ADD CONSTRAINT schedule_attempts_outcome_check
        CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'worker_lost', 'no_listener',
                           'invalid_payload', 'parent_failed'));
