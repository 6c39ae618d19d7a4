-- 0005: how many later scheduling calls a dedupe key or the topic's policy folded
-- into a job (outbox events `deduplicated` and `debounced`), so audit.get answers
-- what get_job answers (JobInfo.deduplicated) after Redis has forgotten the job.
-- On the partitioned table the column is added to every partition.
ALTER TABLE schedule_audit ADD COLUMN deduplicated integer NOT NULL DEFAULT 0;
